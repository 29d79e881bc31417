"""DNS rebinding: a name whose answer changes between the guard's check and the connect is never followed.

Why: http_client.py and ssrf.py claim every new connection resolves through
the guard and opens to an address it just checked, so a DNS answer that
turns into a refused address after the check is refused at connect, and an
answer holding any refused address is refused as a whole. Here real parts
test that: a DNS server (dnslib) on a free loopback UDP port answers A
queries for one name from a script, the real delivery path (``Deliverer``,
its aiohttp session, the guard as the connector's resolver) POSTs to that
name, and two HTTP receivers share one port: 127.0.0.2 (allow-listed) and
127.0.0.1 (loopback, refused). The resolver's cache is off (``cache_s=0``):
in production it keeps an answer 30 s whatever its TTL, so a check and a
connect a moment apart see one answer; off, every lookup asks the server,
the worst case, an answer that may change between any two lookups.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from dnslib import QTYPE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSHandler, DNSLogger, DNSServer

from consumers.notifier.delivery import Attempt, Deliverer, Kind
from consumers.notifier.dns import Resolver
from consumers.notifier.signing import Signer
from consumers.notifier.ssrf import SsrfGuard
from tests.consumers.notifier.conftest import make_secret
from tests.consumers.notifier.receiver import Receiver, Reply
from tests.support import PORT_ATTEMPTS

NAME = "hooks.rebind.test"
ALLOWED, FORBIDDEN = "127.0.0.2", "127.0.0.1"
DELIVERIES = 6
CLOSE = Reply(headers={"connection": "close"})  # every delivery opens a new connection, so resolves again


class ScriptedAnswers(BaseResolver):  # type: ignore[misc]  # dnslib has no type hints
    """Answers the n-th A query for ``NAME`` with ``script[n]`` (the last one from then on), TTL 0; AAAA empty."""

    def __init__(self) -> None:
        self.script: list[list[str]] = [[ALLOWED]]
        self.given: list[list[str]] = []
        self._lock = threading.Lock()  # dnslib handles each query on a thread of its own

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord:
        reply = request.reply()
        if request.q.qtype == QTYPE.A and str(request.q.qname).rstrip(".") == NAME:
            with self._lock:
                answer = self.script[min(len(self.given), len(self.script) - 1)]
                self.given.append(answer)
            for address in answer:
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=0))
        return reply


@dataclass
class Rig:
    dns: ScriptedAnswers
    allowed: Receiver
    forbidden: Receiver
    deliverer: Deliverer

    @property
    def url(self) -> str:
        return f"http://{NAME}:{self.allowed.port}/hook"

    async def deliver_several(self) -> list[Attempt]:
        self.allowed.script("/hook", [CLOSE] * DELIVERIES)
        return [await self.deliverer.deliver(self.url, f"job-{n}", b"{}") for n in range(DELIVERIES)]


def receivers_on_one_port() -> tuple[Receiver, Receiver]:
    """A receiver on 127.0.0.2 and one on 127.0.0.1 at the same port: the URL's port, whichever address DNS gives."""
    for _ in range(PORT_ATTEMPTS):
        allowed = Receiver(host=ALLOWED)
        try:
            return allowed.start(), Receiver(allowed.port, host=FORBIDDEN).start()
        except OSError:  # that port is taken on 127.0.0.1: another one
            allowed.server.server_close()
    raise AssertionError(f"no port free on both {ALLOWED} and {FORBIDDEN} in {PORT_ATTEMPTS} tries")


@pytest.fixture
def dns() -> Iterator[tuple[ScriptedAnswers, str]]:
    answers = ScriptedAnswers()
    server = DNSServer(answers, address="127.0.0.1", port=0, logger=DNSLogger(log="-request,-reply", prefix=False))
    threading.Thread(target=server.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield answers, "%s:%d" % server.server.server_address
    server.stop()
    server.server.server_close()


@pytest.fixture
async def rig(dns: tuple[ScriptedAnswers, str]) -> AsyncIterator[Rig]:
    answers, nameserver = dns
    allowed, forbidden = receivers_on_one_port()
    resolver = Resolver(timeout_s=2, cache_s=0, negative_cache_s=0, nameservers=[nameserver])
    guard = SsrfGuard(allow_list=[f"{ALLOWED}/32"], resolver=resolver)
    deliverer = Deliverer(signer=Signer([make_secret()]), guard=guard, concurrency=4, per_endpoint=2,
                          connect_timeout_s=2, timeout_s=5, retry_after_cap_s=60)
    yield Rig(answers, allowed, forbidden, deliverer)
    await deliverer.aclose()
    allowed.stop()
    forbidden.stop()


def shown(attempts: list[Attempt]) -> str:
    return "; ".join(f"{a.kind}: {a.error or a.status}" for a in attempts)


async def test_a_name_that_rebinds_to_a_refused_address_is_never_connected_to_there(rig: Rig) -> None:
    # Given a name that answers the allow-listed address 3 times, then loopback
    rig.dns.script = [[ALLOWED]] * 3 + [[FORBIDDEN]]
    # When deliveries to it go out one after another, each on a new connection
    attempts = await rig.deliver_several()
    # Then the loopback receiver got nothing, though DNS named it for most connections
    assert rig.forbidden.count() == 0, f"rebinding followed: {rig.forbidden.count()} POSTs reached {FORBIDDEN}; {shown(attempts)}"
    assert [FORBIDDEN] in rig.dns.given, f"DNS never answered {FORBIDDEN}: the test proved nothing ({rig.dns.given})"
    # And each delivery either reached the allowed receiver or was refused at connect, naming the address
    delivered = [a for a in attempts if a.kind is Kind.DELIVERED]
    refused = [a for a in attempts if a.kind is Kind.RETRY and f"resolves to {FORBIDDEN}, which is not a public address" in a.error]
    assert delivered and refused and len(delivered) + len(refused) == DELIVERIES, shown(attempts)
    assert rig.allowed.count() == len(delivered), shown(attempts)


@pytest.mark.parametrize("script", [
    pytest.param([[ALLOWED, FORBIDDEN]], id="mixed-at-check"),
    pytest.param([[ALLOWED], [ALLOWED, FORBIDDEN]], id="mixed-at-connect"),
    pytest.param([[ALLOWED], [FORBIDDEN, ALLOWED]], id="mixed-at-connect-refused-first"),
])
async def test_an_answer_holding_a_refused_address_is_refused_as_a_whole(rig: Rig, script: list[list[str]]) -> None:
    # Given a name whose answer, at the check or only from the connect on, holds an allowed and a refused address
    rig.dns.script = script
    # When deliveries to it go out
    attempts = await rig.deliver_several()
    # Then none reached either receiver: the allowed address in the answer does not redeem the refused one
    assert rig.forbidden.count() == 0 and rig.allowed.count() == 0, shown(attempts)
    assert all(f"resolves to {FORBIDDEN}, which is not a public address" in a.error for a in attempts), shown(attempts)
    # And the refusal came where the script put the refused address: at the check (dead-lettered) or at connect (retried)
    expected = Kind.REFUSED if len(script) == 1 else Kind.RETRY
    assert {a.kind for a in attempts} == {expected}, shown(attempts)
    assert len(rig.dns.given) >= (1 if len(script) == 1 else 1 + DELIVERIES), rig.dns.given

