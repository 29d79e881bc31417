"""Signals of the long-running processes: the first SIGTERM/SIGINT drains, a second exits at once."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

log = logging.getLogger("streamcrew.lifecycle")


def stop_on_signals(what: str, grace_s: float) -> asyncio.Event:
    """An event set by the first SIGTERM or SIGINT; the second one ends the process immediately."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            log.warning("%s: second %s, exiting now", what, name)
            os._exit(128 + signum)
        log.info("%s: %s, draining (grace %gs); send it again to exit at once", what, name, grace_s)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    return stop
