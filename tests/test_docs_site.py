"""The documentation site builds with ``mkdocs build --strict``: no broken link or anchor, no page left out of the nav."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None and not os.environ.get("CI"),
                    reason='the docs extra is not installed: pip install -e ".[docs]" (make setup does)')
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=110, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    home = (tmp_path / "site" / "index.html").read_text()
    assert 'class="mermaid"' in home, "the README's flow diagram is not rendered on the home page"
    for page in ("agents", "llm", "configuration", "benchmarks"):
        assert (tmp_path / "site" / page / "index.html").exists(), f"{page} is not in the site"
