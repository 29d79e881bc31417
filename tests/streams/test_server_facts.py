"""What a server says of itself (HELLO), read the same in RESP2 and RESP3.

In RESP3 (redis-py 8's default) HELLO's reply is a map; in RESP2 (the default of redis-py 5 - 7, and
``?protocol=2`` on any) it is a flat list of field, value pairs. Read as "not a HELLO reply", that list
sent every process to INFO, which a least-privilege ACL user may not run (INFO is @dangerous): on
redis-py 5.0.1 such a user's worker exited at start-up.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from redis.asyncio import Redis

from streams.connection import cluster_enabled, hello_facts, says_cluster


async def test_hellos_flat_reply_gives_the_same_facts_as_the_map(redis_url: str) -> None:
    # Given the server's HELLO reply in RESP3 and in RESP2
    replies = []
    for protocol in (3, 2):
        client = Redis.from_url(redis_url, protocol=protocol, decode_responses=True)
        try:
            replies.append(await client.execute_command("HELLO"))  # type: ignore[no-untyped-call]
        finally:
            await client.aclose()
    resp3, resp2 = replies
    assert isinstance(resp3, dict) and isinstance(resp2, list), (type(resp3), type(resp2))
    # Then both read as the same facts: a standalone server, known without INFO
    facts = hello_facts(resp2)
    assert facts is not None and {k: v for k, v in facts.items() if k != "proto"} == {
        k: v for k, v in (hello_facts(resp3) or {}).items() if k != "proto"}
    assert facts["mode"] == "standalone" and facts["version"].count(".") == 2, facts
    assert says_cluster(facts, {}) is False


async def test_a_user_without_info_learns_the_mode_over_resp2(acl_user: Callable[[str], str]) -> None:
    # Given a user without @dangerous (no INFO) that speaks RESP2
    url = acl_user(f"p-{uuid.uuid4().hex[:8]}:*") + "?protocol=2"
    # Then whether the server is a cluster node is known from HELLO alone
    assert await cluster_enabled(url) is False


def test_replies_that_are_not_hellos_are_not_read_as_one() -> None:
    assert hello_facts(["version"]) is None  # odd length: not field, value pairs
    assert hello_facts(["server", "redis"]) is None  # pairs, but no version
    assert hello_facts([["version"], "7.0.0"]) is None  # a name that is not a string (a proxy's odd reply)
    assert hello_facts("OK") is None
