"""CrewAI's environment defaults; import this before anything imports ``crewai``.

Telemetry, tracing and the version check are off unless the user turned them
on, and CrewAI's storage lives under the temp dir instead of the user's home
unless ``CREWAI_STORAGE_DIR`` is set. CrewAI 1.15 also creates an encryption
key under ``~/.local/share/crewai/credentials`` when it is imported (for
``crewai login``); when we chose the storage dir, that key goes there too.
These are the only environment reads below the settings objects: CrewAI reads
its own variables, so they are set as process defaults.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_DEFAULTS = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
    "OTEL_SDK_DISABLED": "true",
}


def apply() -> None:
    for name, value in _DEFAULTS.items():
        os.environ.setdefault(name, value)
    if "CREWAI_STORAGE_DIR" in os.environ:
        return
    storage = Path(tempfile.gettempdir()) / f"streamcrew-crewai-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    storage.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ["CREWAI_STORAGE_DIR"] = str(storage)
    _redirect_credentials(storage / "credentials")


def _redirect_credentials(path: Path) -> None:
    try:
        from crewai_core.token_manager import TokenManager
    except ImportError:  # older CrewAI without crewai_core: nothing to redirect
        return

    def storage_path() -> Path:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path

    TokenManager._get_secure_storage_path = staticmethod(storage_path)  # type: ignore[method-assign]


apply()
