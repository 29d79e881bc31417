"""What every ``streamcrew`` command shares: the typer apps, option types, settings building, exit codes."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Coroutine
from enum import IntEnum
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from rich.console import Console

from streams.errors import StreamcrewError

T = TypeVar("T")

app = typer.Typer(name="streamcrew", help="Run LLM agent jobs reliably on Redis Streams.", no_args_is_help=True, add_completion=False)
dead_app = typer.Typer(help="Inspect, replay and purge dead letters.", no_args_is_help=True)
app.add_typer(dead_app, name="dead")
webhooks_app = typer.Typer(help="Webhook deliveries.", no_args_is_help=True)
webhooks_dead_app = typer.Typer(help="Inspect, replay and purge webhook dead letters.", no_args_is_help=True)
webhooks_app.add_typer(webhooks_dead_app, name="dead")
app.add_typer(webhooks_app, name="webhooks")
out = Console()
err = Console(stderr=True)


class Exit(IntEnum):
    OK = 0
    JOB_FAILED = 1
    USAGE = 2
    TIMEOUT = 3
    UNAVAILABLE = 4


RedisUrl = Annotated[str | None, typer.Option("--redis-url", help="Redis URL \\[env STREAMCREW_REDIS_URL]", show_default=False)]
Prefix = Annotated[str | None, typer.Option("--prefix", help="key prefix \\[env STREAMCREW_PREFIX]", show_default=False)]


def setup_logging(level: str = "info") -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))  # one line per job is ours


def build(cls: type[T], **overrides: Any) -> T:
    """Settings from options over ``STREAMCREW_*`` env; a bad value exits with its name."""
    try:
        return cls(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        for e in exc.errors():
            err.print(f"[red]invalid setting {'.'.join(map(str, e['loc']))}: {e['msg']}[/red]")
        raise typer.Exit(Exit.USAGE) from None


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine, turning Redis and streamcrew errors into one clear line and an exit code."""
    try:
        import uvloop
    except ImportError:
        uvloop = None
    try:
        return uvloop.run(coro) if uvloop else asyncio.run(coro)
    except RedisConnectionError as exc:
        err.print(f"[red]cannot reach Redis: {exc}[/red]")
        raise typer.Exit(Exit.UNAVAILABLE) from None
    except StreamcrewError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(Exit.USAGE) from None
