"""The streams package type-checks under mypy --strict (pyproject's [tool.mypy])."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_streams_is_mypy_strict_clean() -> None:
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "streams"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mock_llm_is_mypy_strict_clean() -> None:
    # It runs uvicorn in a thread: what it overrides there must exist in the uvicorn installed (an override of a
    # method uvicorn removed does nothing, and mypy says so)
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", "consumers/mock_llm.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
