"""A gateway bound beyond loopback without API keys says so at start (a WARNING, not only 'auth off' at INFO)."""

import logging

import pytest

from consumers.gateway.app import create_app, is_loopback_host
from consumers.gateway.settings import GatewaySettings


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True), ("127.0.0.2", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("gateway.internal", False),
])
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize(("host", "keys", "warned"), [
    ("0.0.0.0", "", True), ("0.0.0.0", "k-one-secret-value", False), ("127.0.0.1", "", False),
])
async def test_start_warns_of_an_open_gateway(redis, redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch, host: str, keys: str, warned: bool) -> None:
    # In-process, nothing bound: the stream gauges register once per process (the registry is global), so not here
    monkeypatch.setattr("consumers.gateway.app.register_stream_gauges", lambda *a, **k: None)
    settings = GatewaySettings(redis_url=redis_url, prefix=prefix, host=host, api_keys=keys)
    app = create_app(settings, redis=redis)
    with caplog.at_level(logging.INFO, logger="streamcrew.gateway"):
        async with app.router.lifespan_context(app):
            pass
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "streamcrew.gateway"]
    assert bool(warnings) is warned, warnings
    assert all("k-one-secret-value" not in r.getMessage() for r in caplog.records)
