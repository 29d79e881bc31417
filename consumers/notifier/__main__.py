"""``python -m consumers.notifier``: the notifier without the typer CLI (same options as ``streamcrew notifier``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from pydantic import ValidationError

from consumers.notifier.app import run_notifier
from consumers.notifier.settings import NotifierSettings

OPTIONS = {  # option -> (settings field, type)
    "--max-attempts": ("max_attempts", int),
    "--backoff": ("backoff_s", float),
    "--metrics-port": ("metrics_port", int),
    "--lease": ("lease_s", float),
    "--concurrency": ("concurrency", int),
    "--per-endpoint-concurrency": ("per_endpoint_concurrency", int),
    "--timeout": ("timeout_s", float),
    "--connect-timeout": ("connect_timeout_s", float),
    "--grace": ("grace_s", float),
    "--log-level": ("log_level", str),
    "--redis-url": ("redis_url", str),
    "--prefix": ("prefix", str),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m consumers.notifier", description="Webhook fan-out consumer.")
    parser.add_argument("--allow-private", action="store_true", default=None, help="allow loopback/private targets")
    for flag, (field, kind) in OPTIONS.items():
        parser.add_argument(flag, dest=field, type=kind, default=None)
    args = vars(parser.parse_args(argv))
    try:
        settings = NotifierSettings(**{k: v for k, v in args.items() if v is not None})
    except ValidationError as exc:
        for e in exc.errors():
            print(f"invalid setting {'.'.join(map(str, e['loc']))}: {e['msg']}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        import uvloop
    except ImportError:
        return asyncio.run(run_notifier(settings))
    return uvloop.run(run_notifier(settings))


if __name__ == "__main__":
    sys.exit(main())
