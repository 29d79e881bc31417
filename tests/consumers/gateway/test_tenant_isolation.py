"""Two tenants' keys on one gateway: neither can take over, or watch, the other's jobs (issue 10, defect 1)."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit, urlunsplit

from tests.consumers.gateway.support import GatewayFactory, sse_events
from tests.support import WorkerFactory, wait_until

KEYS = {"STREAMCREW_API_KEYS": "key-a:acme,key-b:globex"}
# What expiry followed by globex's POST leaves, atomically: acme's record gone, globex's in its place.
RECREATE = """
redis.call('DEL', KEYS[1])
local eid = redis.call('XADD', KEYS[2], '*', 'agent', 'echo', 'data', '{"secret": "globex"}', 'id', 'shared-id', 'tenant', 'globex')
redis.call('HSET', KEYS[1], 'status', 'queued', 'agent', 'echo', 'attempts', 0, 'tenant', 'globex',
  'source', 'normal/' .. eid, 'lane', 'normal')
"""


async def test_explicit_ids_of_the_generated_shape_are_refused(gateways: GatewayFactory) -> None:
    # Given tenant acme trying to squat the ids the clock will hand to id-less jobs a few seconds from now
    gateway = await gateways.start(KEYS)
    ahead = int(time.time() * 1000) + 8000
    async with gateway.client("key-a") as acme:
        for job_id in (f"{ahead}-0", f"{ahead + 1}-0", f"normal:{ahead}-0", f"high:{ahead}-1", f"{ahead}-0:2", f"low:{ahead}-0:1"):
            squat = await acme.post("/jobs", json={"agent": "echo", "data": {}, "id": job_id, "webhook": "http://127.0.0.1:9/a"})
            # Then each is refused: generated ids are reserved
            assert squat.status_code == 422, squat.text
            assert "reserved" in squat.json()["error"]["message"]


async def test_an_id_less_job_never_adopts_an_existing_record(gateways: GatewayFactory, workers: WorkerFactory, redis, keys) -> None:  # type: ignore[no-untyped-def]
    # Given records squatting the next ids of the clock (as a raw XADD naming them could leave them)
    gateway = await gateways.start(KEYS)
    ahead = int(time.time() * 1000) + 60_000
    await redis.set(keys.clock, f"{ahead}-0")
    squatted = [f"{ahead}-{seq}" for seq in range(1, 6)]
    for job_id in squatted:
        await redis.hset(keys.job(job_id), mapping={"status": "queued", "agent": "echo", "tenant": "acme",
                                                    "webhook": "http://127.0.0.1:9/acme", "source": "normal/0-1"})
    async with gateway.client("key-b") as globex, gateway.client("key-a") as acme:
        # When tenant globex submits five id-less jobs, which the clock puts on exactly those entry IDs
        posted = [await globex.post("/jobs", json={"agent": "echo", "data": {"i": i, "secret": f"globex-{i}"}}) for i in range(5)]
        assert all(p.status_code == 202 for p in posted), [p.text for p in posted]
        job_ids = [p.json()["job_id"] for p in posted]
        # Then each got a record of its own, named apart, and the squatted records are untouched
        assert job_ids == [f"normal:{job_id}" for job_id in squatted]
        for job_id in squatted:
            assert await redis.hget(keys.job(job_id), "tenant") == "acme"
        # And the jobs run to their own results, readable by globex only
        workers.start()
        for i, job_id in enumerate(job_ids):
            async def done(job_id: str = job_id) -> bool:
                return (await globex.get(f"/jobs/{job_id}/result")).status_code == 200

            await wait_until(done, timeout=20, what=f"globex's job {job_id} to end")
            result = (await globex.get(f"/jobs/{job_id}/result")).json()
            assert result["status"] == "completed" and result["tenant"] == "globex"
            assert result["result"]["echo"]["secret"] == f"globex-{i}"
            assert (await acme.get(f"/jobs/{job_id}/result")).status_code == 404
        for job_id in squatted:
            assert (await acme.get(f"/jobs/{job_id}")).json()["status"] == "queued"


async def test_an_open_event_stream_rechecks_the_tenant(gateways: GatewayFactory, workers: WorkerFactory, redis, keys) -> None:  # type: ignore[no-untyped-def]
    # Given acme following the events of its queued job "shared-id"
    gateway = await gateways.start(KEYS)
    async with gateway.client("key-a") as acme, gateway.client("key-b") as globex:
        assert (await acme.post("/jobs", json={"agent": "echo", "data": {}, "id": "shared-id"})).status_code == 202
        async with sse_events(acme, "/jobs/shared-id/events") as events:
            first = await anext(events)
            assert first["id"] == "0-queued"
            # When, in one step, the record goes (as when it expires) and globex's job of the same id takes its place
            await redis.eval(RECREATE, 2, keys.job("shared-id"), keys.lane("normal"))
            assert (await globex.get("/jobs/shared-id")).json()["tenant"] == "globex"
            # And a worker runs globex's job
            workers.start()
            # Then acme's stream ends with "not found" and never carries globex's record
            received = [event async for event in events]
        assert [e["event"] for e in received] == ["error"], received
        assert "globex" not in str(received)


class VanishingLink:
    """A loopback link to the test's Redis that deletes a job's record just before it passes on the script answer
    naming that job: the record goes (as when it expires) between publish.lua and the gateway's read of it."""

    def __init__(self, redis, redis_url: str) -> None:  # type: ignore[no-untyped-def]
        self.redis, self._target = redis, urlsplit(redis_url)
        self.armed: tuple[bytes, str] | None = None
        self.fired = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self.url = ""

    async def __aenter__(self) -> VanishingLink:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = urlunsplit(self._target._replace(netloc=f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    def arm(self, job_id: str, record_key: str) -> None:
        self.armed, self.fired = (f"\r\n{job_id}\r\n".encode(), record_key), asyncio.Event()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self._handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        server_reader, server_writer = await asyncio.open_connection(self._target.hostname, self._target.port)
        self._writers |= {client_writer, server_writer}
        script_sent = False

        async def upstream() -> None:
            nonlocal script_sent
            while data := await client_reader.read(65536):
                script_sent = script_sent or b"\r\nEVALSHA\r\n" in data
                server_writer.write(data)
                await server_writer.drain()

        async def downstream() -> None:
            nonlocal script_sent
            while data := await server_reader.read(65536):
                if script_sent and self.armed and self.armed[0] in data:
                    await self.redis.delete(self.armed[1])  # before the gateway hears publish.lua's answer
                    self.armed = None
                    self.fired.set()
                script_sent = False
                client_writer.write(data)
                await client_writer.drain()

        try:
            await asyncio.gather(upstream(), downstream())
        except (ConnectionError, OSError):
            pass
        finally:
            client_writer.close()
            server_writer.close()


async def test_a_resubmitted_id_whose_record_vanishes_tells_another_tenant_nothing(  # type: ignore[no-untyped-def]
        gateways: GatewayFactory, redis, redis_url: str, keys) -> None:
    async with VanishingLink(redis, redis_url) as link:
        # (in a thread of its own: the start waits for the gateway without yielding, and the link runs on this loop)
        gateway = await asyncio.to_thread(asyncio.run, gateways.start(KEYS, redis_url=link.url))
        async with gateway.client("key-a") as acme, gateway.client("key-b") as globex:
            # Given acme's queued jobs "shared-id" and "own-id"
            for job_id in ("shared-id", "own-id"):
                assert (await acme.post("/jobs", json={"agent": "echo", "data": {}, "id": job_id})).status_code == 202
            # When globex posts the id "shared-id", and acme's record goes between publish.lua and the gateway's read
            link.arm("shared-id", keys.job("shared-id"))
            answer = await globex.post("/jobs", json={"agent": "echo", "data": {}, "id": "shared-id"})
            assert link.fired.is_set()
            # Then globex hears the id is taken, not the status of acme's job
            assert answer.status_code == 409, answer.text
            assert answer.json()["error"]["code"] == "id_conflict" and "queued" not in answer.text
            # And acme, resubmitting its own id in the same window, is answered as before: 200 with the status publish.lua saw
            link.arm("own-id", keys.job("own-id"))
            again = await acme.post("/jobs", json={"agent": "echo", "data": {}, "id": "own-id"})
            assert link.fired.is_set()
            assert again.status_code == 200 and again.json()["status"] == "queued", again.text
