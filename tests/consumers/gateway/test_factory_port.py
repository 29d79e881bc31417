"""The tests' gateway factory talks to its own gateway: a port another process bound first (tests run in
parallel) is given up for another, not mistaken for the gateway because something there answers /healthz."""

from __future__ import annotations

import pytest

import tests.support
from streams.embedded import free_port
from tests.consumers.gateway.support import GatewayFactory


async def test_a_port_taken_before_the_gateway_binds_it_is_given_up(
    gateways: GatewayFactory, squatter: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a first port drawn that another server holds (and answers /healthz on)
    drawn = iter([squatter])
    monkeypatch.setattr(tests.support, "free_port", lambda: next(drawn, None) or free_port())
    # When the factory starts a gateway
    gateway = await gateways.start()
    # Then it serves on another port, and it is the gateway that answers there
    assert gateway.port != squatter
    async with gateway.client() as client:
        assert (await client.get("/jobs/nothing-here")).json()["error"]["code"] == "job_not_found"
