"""A webhook whose host is an IP literal the notifier's SSRF guard refuses is 422 at once (it used to be accepted and
end in the webhook dead letters after the job ran). The gateway reads the notifier's STREAMCREW_ALLOW_PRIVATE and
STREAMCREW_ALLOW_LIST, so both agree; names are not resolved at the gateway, the notifier checks them."""

from __future__ import annotations

import httpx

from streams.keys import LANES, Keys
from tests.consumers.gateway.support import GatewayFactory
from tests.consumers.notifier.test_units import REFUSED_URLS

NOT_PUBLIC = {  # url: what the 422 says is wrong with it
    "http://127.0.0.1/hook": "127.0.0.1 is not a public address (loopback)",
    "http://10.0.0.5/x": "(private)",
    "http://169.254.1.1/": "(link-local)",
    "http://169.254.169.254/": "(cloud-metadata)",
    "http://[::1]/": "::1 is not a public address (loopback)",
    "http://[fe80::1]/": "(link-local)",
    "https://[fc00::1]:8443/x": "(private)",
    "http://[::ffff:127.0.0.1]/": "(loopback (IPv4 127.0.0.1 embedded))",
    "http://2130706433/": "2130706433 is not a public address (loopback)",  # 127.0.0.1 in a legacy form
}
PUBLIC = ["http://8.8.8.8/hook", "https://[2606:4700:4700::1111]/hook", "https://example.com/hook",
          "http://localhost:9/hook"]  # names, loopback's own too, are the notifier's to resolve and check


def job(webhook: str) -> dict[str, object]:
    return {"agent": "echo", "data": {}, "webhook": webhook}


def assert_refused(answer: httpx.Response, why: str) -> None:
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_request"
    assert [(d["field"], d["type"]) for d in error["details"]] == [("webhook", "webhook_refused")], error
    assert error["message"].startswith("webhook: the notifier would refuse it: ") and why in error["message"], error["message"]


async def queued(redis, keys: Keys) -> int:  # type: ignore[no-untyped-def]
    return sum([await redis.xlen(keys.lane(lane)) for lane in LANES])


async def test_non_public_ip_literals_are_422_and_public_ones_and_names_202(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a gateway with the notifier's defaults (no STREAMCREW_ALLOW_PRIVATE, no allow-list)
    gateway = await gateways.start()
    async with gateway.client() as client:
        # When jobs name a webhook on each kind of non-public IP literal
        for url, why in NOT_PUBLIC.items():
            # Then each is 422 naming the webhook and why, before anything is queued
            assert_refused(await client.post("/jobs", json=job(url)), why)
        # And a workflow and a task are refused alike
        workflow = {"agent": "workflow", "data": {"steps": [{"id": "a", "agent": "echo", "data": {}}]}, "webhook": "http://10.1.2.3/"}
        assert_refused(await client.post("/jobs", json=workflow), "(private)")
        assert_refused(await client.post("/tasks", json={"query": "hi", "webhook": "http://[::1]:8080/"}), "(loopback)")
        assert await queued(redis, keys) == 0
        # And every literal the notifier's own tests see it refuse is refused here (its names are its own to check)
        for url in REFUSED_URLS:
            if "localhost" not in url:
                assert_refused(await client.post("/jobs", json=job(url)), "")
        # When jobs name a public literal or a name
        accepted = [await client.post("/jobs", json=job(url)) for url in PUBLIC]
        # Then they are queued as before
        assert [a.status_code for a in accepted] == [202] * len(PUBLIC), [a.text for a in accepted]
        assert await queued(redis, keys) == len(PUBLIC)


async def test_allow_private_accepts_private_literals_but_not_cloud_metadata(gateways: GatewayFactory) -> None:
    # Given a gateway with STREAMCREW_ALLOW_PRIVATE=true, as the notifier of a development setup has
    gateway = await gateways.start({"STREAMCREW_ALLOW_PRIVATE": "true"})
    async with gateway.client() as client:
        # Then loopback and private literals are accepted
        for url in ("http://127.0.0.1:8080/hook", "http://10.0.0.5/x", "http://[::1]/", "http://[::ffff:127.0.0.1]/"):
            answer = await client.post("/jobs", json=job(url))
            assert answer.status_code == 202, (url, answer.text)
        # And cloud metadata stays refused, as the notifier refuses it, saying what would allow it
        assert_refused(await client.post("/jobs", json=job("http://169.254.169.254/latest/meta-data")),
                       "(cloud-metadata); allow it with STREAMCREW_ALLOW_LIST")
        # And a legacy form stays refused, as the notifier refuses it
        assert_refused(await client.post("/jobs", json=job("http://127.1/")), "write the address as 127.0.0.1")


async def test_the_allow_list_is_the_notifiers(gateways: GatewayFactory) -> None:
    # Given a gateway with the notifier's allow-list: a CIDR and the metadata address
    gateway = await gateways.start({"STREAMCREW_ALLOW_LIST": "10.20.0.0/16, 169.254.169.254"})
    async with gateway.client() as client:
        # Then listed literals are accepted, and one outside the list is not
        for url in ("http://10.20.3.4/", "http://169.254.169.254/"):
            answer = await client.post("/jobs", json=job(url))
            assert answer.status_code == 202, (url, answer.text)
        assert_refused(await client.post("/jobs", json=job("http://10.30.0.1/")), "(private)")
