"""The resolver's per-domain bound against a DNS server on loopback that takes every query and answers none."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest

from consumers.notifier.dns import Resolver, Unresolvable


def query_name(packet: bytes) -> str:
    """The question's name of a DNS query (RFC 1035 §4.1.2: labels after the 12-byte header)."""
    labels, at = [], 12
    while length := packet[at]:
        labels.append(packet[at + 1:at + 1 + length].decode())
        at += 1 + length
    return ".".join(labels)


class SilentDns:
    """A UDP socket on a free loopback port: records the names asked, never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.address = "%s:%d" % self.sock.getsockname()
        self.asked: set[str] = set()

    async def wait_asked(self, names: set[str], timeout_s: float) -> None:
        async with asyncio.timeout(timeout_s):
            while not names <= self.asked:
                self.asked.add(query_name(await asyncio.get_running_loop().sock_recv(self.sock, 512)))


@pytest.fixture
async def silent_dns() -> AsyncIterator[SilentDns]:
    dns = SilentDns()
    yield dns
    dns.sock.close()


async def test_a_lookup_beyond_the_domains_bound_fails_at_once_instead_of_waiting(silent_dns: SilentDns) -> None:
    # Given a resolver allowing 2 lookups per domain, and 2 lookups under silent.test the DNS server never answers
    resolver = Resolver(timeout_s=1.0, per_domain=2, nameservers=[silent_dns.address])
    started = time.monotonic()
    hung = [asyncio.create_task(resolver.resolve(f"h{i}.silent.test")) for i in range(2)]
    try:
        await silent_dns.wait_asked({"h0.silent.test", "h1.silent.test"}, timeout_s=5)
        # When a third name under the same domain is looked up
        async with asyncio.timeout(0.5):  # not the 1 s DNS timeout, nor a wait for a slot
            with pytest.raises(Unresolvable, match=r"cannot resolve h2.silent.test: 2 lookups under silent.test already in flight"):
                await resolver.resolve("h2.silent.test")
        # Then it failed at once (a retry for its delivery), and the 2 under way end on their own timeout, not later
        for task in hung:
            with pytest.raises(Unresolvable, match="DNS gave no answer within 1s"):
                await asyncio.wait_for(task, 5)
        assert time.monotonic() - started < 1.9
        # And the refusal was not cached: with the slots free again, the name is really asked
        next_try = asyncio.create_task(resolver.resolve("h2.silent.test"))
        await silent_dns.wait_asked({"h2.silent.test"}, timeout_s=5)
        with pytest.raises(Unresolvable, match="DNS gave no answer"):
            await asyncio.wait_for(next_try, 5)
    finally:
        await resolver.aclose()


async def test_names_under_a_public_suffix_are_bounded_per_registrable_domain(silent_dns: SilentDns) -> None:
    # Given 2 lookups under evil.co.uk that the DNS server never answers, with 2 allowed per domain
    resolver = Resolver(timeout_s=1.0, per_domain=2, nameservers=[silent_dns.address])
    hung = [asyncio.create_task(resolver.resolve(f"h{i}.evil.co.uk")) for i in range(2)]
    try:
        await silent_dns.wait_asked({"h0.evil.co.uk", "h1.evil.co.uk"}, timeout_s=5)
        # When a name of another domain under the same suffix is looked up
        other = asyncio.create_task(resolver.resolve("hooks.bank.co.uk"))
        # Then it is really asked (co.uk is a public suffix, not one domain), not refused for evil.co.uk's lookups
        await silent_dns.wait_asked({"hooks.bank.co.uk"}, timeout_s=5)
        with pytest.raises(Unresolvable, match="DNS gave no answer"):
            await asyncio.wait_for(other, 5)
        for task in hung:
            with pytest.raises(Unresolvable):
                await asyncio.wait_for(task, 5)
    finally:
        await resolver.aclose()
