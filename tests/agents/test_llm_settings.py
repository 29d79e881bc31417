"""LLM settings refuse bad prices when they are read (worker start), not at the first LLM job."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("price", ["[-1, 2]", "[1, -0.5]", "[Infinity, 1]", "[1, NaN]", '{"prompt": 1, "completion": -Infinity}'])
def test_a_negative_or_non_finite_price_is_a_settings_error(tmp_path: Path, price: str) -> None:
    # A negative cost made every call raise after the provider had answered (a Prometheus counter refuses
    # to go down), and NaN or infinity poisoned the cost metric for good: both must stop the worker at start.
    path = tmp_path / "prices.json"
    path.write_text(f'{{"m": {price}}}')
    with pytest.raises(ValidationError, match="price for 'm' must be"):
        LLMSettings(price_file=path)
    if not price.startswith("{"):
        with pytest.raises(ValidationError, match="price for 'm' must be"):
            LLMSettings(prices={"m": json.loads(price)})


def test_keys_given_one_per_line_are_a_settings_error_that_shows_no_key() -> None:
    # One per line (a secret file) made one key with a line break: every call then raised aiohttp's ValueError
    with pytest.raises(ValidationError, match="key#1 holds a control character") as caught:
        LLMSettings(base_url="http://127.0.0.1:9/v1", api_keys="sk-first-0123456789\nsk-second-0123456789")  # type: ignore[arg-type]
    assert "0123456789" not in str(caught.value)
    assert len(LLMSettings(api_keys="sk-first-0123456789,\nsk-second-0123456789\n").api_keys) == 2  # type: ignore[arg-type]


@pytest.mark.parametrize("base_url", ["localhost:8100/v1", "api.example.com/v1", "ftp://example.com/v1", "http:///v1",
                                      "alice:hunter2@llm.example.com/v1", "http://llm.example.com:99999/v1"])
def test_a_base_url_that_is_no_http_url_with_a_host_is_a_settings_error_that_shows_no_secret(base_url: str) -> None:
    # Such a URL failed every call instead, each retried for its whole budget as a transport error "at None:None"
    with pytest.raises(ValidationError, match="must be an http:// or https:// URL with a host") as caught:
        LLMSettings(base_url=base_url)
    assert "hunter2" not in str(caught.value) and "alice" not in str(caught.value)


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:9/v1", "https://api.deepseek.com", "http://[::1]:8100/v1",
                                      "https://u:p@llm.example.com/v1?api-version=2024-06-01"])
def test_an_http_url_with_a_host_is_a_base_url(base_url: str) -> None:
    assert LLMSettings(base_url=base_url).base_url == base_url


def test_the_worker_exits_at_start_on_a_base_url_without_a_scheme(monkeypatch: pytest.MonkeyPatch, refusing_port: int) -> None:
    monkeypatch.setenv("STREAMCREW_REDIS_URL", f"redis://127.0.0.1:{refusing_port}/0")  # never any real Redis, fix or no fix
    monkeypatch.setenv("STREAMCREW_LLM_BASE_URL", "alice:hunter2@localhost:8100/v1")
    result = CliRunner().invoke(app, ["worker", "--metrics-port", "0"])
    assert result.exit_code == 2, result.output
    assert "must be an http:// or https:// URL" in result.output and "hunter2" not in result.output
