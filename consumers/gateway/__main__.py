"""``python -m consumers.gateway [--host H] [--port P] [--redis-url URL] [--prefix P]``, until the CLI has ``gateway``."""

from __future__ import annotations

import argparse

from consumers.gateway import GatewaySettings, run_gateway


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m consumers.gateway", description="streamcrew HTTP gateway")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--redis-url")
    parser.add_argument("--prefix")
    args = parser.parse_args()
    overrides = {k: v for k, v in vars(args).items() if v is not None}
    run_gateway(GatewaySettings(**overrides))


if __name__ == "__main__":
    main()
