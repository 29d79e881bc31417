"""The streamcrew CLI (``gateway`` included) with one dead-letter reason more in ``streams.dead.REASONS``, as the
next reason someone adds: ``python -m tests.consumers.gateway.new_reason <command> ...``."""

from __future__ import annotations

import runpy

from streams import dead

NEW_REASON = "brand_new"

if __name__ == "__main__":
    dead.REASONS = (*dead.REASONS, NEW_REASON)  # before the CLI and the gateway are imported: they read it then
    runpy.run_module("consumers.cli", run_name="__main__", alter_sys=True)
