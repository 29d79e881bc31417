"""What every ``streamcrew`` command shares: the typer apps, option types, settings building, exit codes."""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections.abc import Coroutine
from enum import IntEnum
from typing import Annotated, Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import typer
from pydantic import ValidationError
from pydantic_settings import SettingsError
from redis.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, OutOfMemoryError, ResponseError
from rich.console import Console
from rich.markup import escape

from streams.config import StreamSettings
from streams.connection import url_option_problem
from streams.errors import ConfigError, StreamcrewError
from streams.keys import parse_partitions
from streams.outage import REDIS_DOWN, WritesHeldBack, quiet_cluster_refresh_errors
from streams.seeds import seed_urls

T = TypeVar("T")

# An uncaught error's traceback shows no frame's locals: they hold --llm-api-keys, --webhook-secret and Redis URLs
# (typer 0.16, which pyproject.toml allows, showed them by default).
app = typer.Typer(name="streamcrew", help="Run LLM agent jobs reliably on Redis Streams.", no_args_is_help=True, add_completion=False,
                  pretty_exceptions_show_locals=False)
dead_app = typer.Typer(help="Inspect, replay and purge dead letters.", no_args_is_help=True)
app.add_typer(dead_app, name="dead")
webhooks_app = typer.Typer(help="Webhook deliveries.", no_args_is_help=True)
webhooks_dead_app = typer.Typer(help="Inspect, replay and purge webhook dead letters.", no_args_is_help=True)
webhooks_app.add_typer(webhooks_dead_app, name="dead")
app.add_typer(webhooks_app, name="webhooks")
out = Console()
err = Console(stderr=True, soft_wrap=True)  # an error is one line, also in a pipe or a log (no wrapping at 80 columns)


class Exit(IntEnum):
    OK = 0
    JOB_FAILED = 1
    NOT_FOUND = 1  # `job`: no record of that id
    DECLINED = 1  # a confirmation answered no: nothing done (click's Abort exits 1 too)
    USAGE = 2
    TIMEOUT = 3
    UNAVAILABLE = 4


RedisUrl = Annotated[str | None, typer.Option("--redis-url", help="Redis URL \\[env STREAMCREW_REDIS_URL]", show_default=False)]
MetricsHost = Annotated[str | None, typer.Option("--metrics-host", help="address /metrics listens on \\[env STREAMCREW_METRICS_HOST, default 0.0.0.0]", show_default=False)]
Prefix = Annotated[str | None, typer.Option("--prefix", help="key prefix \\[env STREAMCREW_PREFIX]", show_default=False)]
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")  # what both logging and uvicorn (the gateway) accept
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
DB_PATH = re.compile(r"/?\d*")  # a URL's path: none, or /<database number>


def setup_logging(level: str = "info") -> None:
    if level.lower() not in LOG_LEVELS:
        err.print(f"[red]invalid setting log_level: {escape(repr(level))} is not one of {', '.join(LOG_LEVELS)}[/red]")
        raise typer.Exit(Exit.USAGE)
    logging.basicConfig(level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))  # one line per job is ours
    quiet_cluster_refresh_errors()  # an outage of a whole cluster is one line per loop, not one per retry


# stats and monitor: as a worker's --partitions, but the option alone (a worker's STREAMCREW_SERVE_PARTITIONS in the
# environment does not narrow what an operator asks for)
ShownPartitions = Annotated[str | None, typer.Option("--partitions", help="partitions to show, e.g. 0-3,5 \\[default: all]", show_default=False)]


def shown_partitions(spec: str | None, settings: StreamSettings) -> tuple[int, ...] | None:
    """``--partitions`` of stats and monitor, parsed and refused as a worker's is (``streams.keys.parse_partitions``,
    the same line); None: every partition."""
    if spec is None:
        return None
    try:
        return parse_partitions(spec, settings.partitions)
    except ValueError as exc:
        err.print(f"[red]invalid settings: {escape(str(exc))}[/red]")
        raise typer.Exit(Exit.USAGE) from None


def build(cls: type[T], **overrides: Any) -> T:
    """Settings from options over ``STREAMCREW_*`` env; a bad value exits with its name."""
    try:
        settings = cls(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        for e in exc.errors():
            # a model validator's error names no field
            where = f"setting {'.'.join(map(str, e['loc']))} ({_env_name(cls, str(e['loc'][0]))})" if e["loc"] else "settings"
            err.print(f"[red]invalid {where}: {escape(e['msg'].removeprefix('Value error, '))}[/red]")
        raise typer.Exit(Exit.USAGE) from None
    except SettingsError as exc:  # a variable of a structured setting that is not JSON: said without its value
        field = re.search(r'field "(\w+)"', str(exc))
        name = _env_name(cls, field.group(1)) if field else "a STREAMCREW_ variable"
        err.print(f"[red]invalid setting {name}: not valid JSON[/red]")
        raise typer.Exit(Exit.USAGE) from None
    if isinstance(settings, StreamSettings) and settings.redis_url and (problem := _redis_url_problem(settings.redis_url)):
        err.print(f"[red]invalid setting redis_url: {escape(problem)}[/red]")
        raise typer.Exit(Exit.USAGE)
    return settings


def _env_name(cls: type[Any], field: str) -> str:
    """The environment variable of settings field ``field`` (``max_retries`` -> ``STREAMCREW_LLM_MAX_RETRIES``)."""
    return f"{cls.model_config.get('env_prefix', '')}{field}".upper()


def _redis_url_problem(url: str) -> str | None:
    """Why redis-py would refuse ``url``, in words that quote none of it (it may hold a password)."""
    if not url.startswith(REDIS_SCHEMES):
        return f"it must start with one of {', '.join(REDIS_SCHEMES)}"
    try:
        seeds = seed_urls(url)  # a Redis Cluster's nodes may be listed: host1:port1,host2:port2
    except ConfigError as exc:
        return str(exc)
    for seed in seeds:
        parts = urlsplit(seed)
        try:
            parts.port
        except ValueError:
            return "its port is not a number from 0 to 65535"
        # What redis-py would read otherwise, quietly: no host is localhost, and a path that is not a number is database 0
        query = parse_qs(parts.query)
        if parts.scheme != "unix" and not parts.hostname and "host" not in query:
            return "it names no host"
        if parts.scheme != "unix" and "db" not in query and not DB_PATH.fullmatch(unquote(parts.path)):
            return "its database (the path after the host) is not a database number (0, 1, ...)"
        try:
            parse_url(seed)  # type: ignore[no-untyped-call]
        except ValueError as exc:
            return str(exc)  # a bad query option: redis-py names the option, not its value
        if problem := url_option_problem(seed):
            return problem
    return None


# An outage's errors, but a plain OSError (a file the command reads) is not Redis's.
REDIS_OUTAGES = tuple(kind for kind in REDIS_DOWN if kind is not OSError)
NO_SUCH_DB = "DB index is out of range"  # Redis' answer to the SELECT of a URL's database it does not have
# What Redis answers a client that sent no password (RESP3's HELLO, RESP2's first command): its text names no URL.
NO_PASSWORD = ("HELLO must be called with the client already authenticated", "NOAUTH", "Authentication required")
PASSWORD_HINT = "; it asks for a password, and the URL gives none: redis://:PASSWORD@host:port/0 (or redis://USER:PASSWORD@...)"


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine, turning Redis and streamcrew errors into one clear line and an exit code."""
    try:
        import uvloop
    except ImportError:
        uvloop = None
    try:
        return uvloop.run(coro) if uvloop else asyncio.run(coro)
    except RedisConnectionError as exc:
        hint = PASSWORD_HINT if any(text in str(exc) for text in NO_PASSWORD) else ""
        err.print(f"[red]cannot reach Redis: {escape(str(exc))}{hint}[/red]")
        raise typer.Exit(Exit.UNAVAILABLE) from None
    except OutOfMemoryError as exc:
        err.print(f"[red]Redis refused a write: it is out of memory ({escape(str(exc))}); free memory or raise maxmemory, then retry[/red]")
        raise typer.Exit(Exit.UNAVAILABLE) from None
    except WritesHeldBack as exc:
        err.print(f"[red]Redis takes no writes for now ({escape(str(exc))}); retry once it does[/red]")
        raise typer.Exit(Exit.UNAVAILABLE) from None
    except NoPermissionError as exc:
        err.print(f"[red]Redis refused a command: {escape(str(exc))}; the Redis user needs the prefix's keys (~<prefix>:*) and "
                  "the commands of docs/operations.md, 'A Redis user of its own'[/red]")
        raise typer.Exit(Exit.UNAVAILABLE) from None
    except REDIS_OUTAGES as exc:  # the rest of an outage: a cluster with a slot no master serves, a failover
        err.print(f"[red]Redis unavailable ({type(exc).__name__}: {escape(str(exc))}); retry once it is back[/red]")
        raise typer.Exit(Exit.UNAVAILABLE) from None
    except StreamcrewError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(Exit.USAGE) from None
    except ResponseError as exc:  # redis-py selects the URL's database on connecting: a number the server lacks is the URL's fault
        if not str(exc).startswith(NO_SUCH_DB):
            raise
        err.print(f"[red]invalid setting redis_url: Redis refused its database number ({NO_SUCH_DB}; a Redis has 0-15 unless "
                  "its 'databases' setting says otherwise)[/red]")
        raise typer.Exit(Exit.USAGE) from None
