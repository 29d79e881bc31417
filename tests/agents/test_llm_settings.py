"""LLM settings refuse bad prices when they are read (worker start), not at the first LLM job."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from agents.llm import LLMSettings
from consumers.cli import app


def test_a_price_file_that_cannot_be_read_or_parsed_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="cannot read price file"):
        LLMSettings(price_file=tmp_path / "missing.json")
    bad = tmp_path / "prices.json"
    bad.write_text('{"m": [1]}')
    with pytest.raises(ValidationError, match=r"price for 'm' must be \[prompt, completion\]"):
        LLMSettings(price_file=bad)
    bad.write_text('{"m": {"prompt": 1, "completion": 2}}')
    assert LLMSettings(price_file=bad).price_file == bad


def test_the_worker_exits_at_start_on_a_bad_price_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMCREW_LLM_PRICE_FILE", str(tmp_path / "missing.json"))
    result = CliRunner().invoke(app, ["worker", "--metrics-port", "0"])
    assert result.exit_code == 2, result.output
    assert "cannot read price file" in result.output
