"""A command whose connection another task closes before it is written is retried, never a crash.

redis-py up to 8.1 raises the transport's AttributeError/TypeError there (its issues #3546, #4287), which
no retry list names: during a cluster failover it ended a worker's loop. streams.connection turns it back
into ConnectionError; redis-py 8.2 raises ConnectionError itself (#4288), with its own message. Either
way the caller must see a ConnectionError, the kind the clients retry. The race is recreated exactly:
the connection is closed while the command waits on its health check, as the cluster client's failover
handling does from another task.
"""

from __future__ import annotations

import asyncio

import pytest
import uvloop
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError

from streams.connection import connect

# streams.connection's message (redis-py <= 8.1) or redis-py 8.2's own ("... by the server before write").
CLOSED_WRITE = "Connection closed (while writing|by the server)"


def close_while_waiting(conn: AbstractConnection, *, times: int) -> list[int]:
    """The next ``times`` commands on ``conn`` find it closed after their health check; returns a hit counter."""
    hits: list[int] = []
    original = conn.check_health

    async def check_then_lose_connection() -> None:
        await original()
        if len(hits) < times:
            hits.append(1)
            await conn.disconnect()  # what another task does to this pooled connection meanwhile

    conn.check_health = check_then_lose_connection  # type: ignore[method-assign]
    return hits


async def test_a_write_on_a_connection_closed_meanwhile_is_a_connection_error(redis_url: str) -> None:
    client = connect(redis_url)
    try:
        conn = await client.connection_pool.get_connection()
        try:
            hits = close_while_waiting(conn, times=1)
            with pytest.raises(RedisConnectionError, match=CLOSED_WRITE):
                await conn.send_command("PING")
            assert hits == [1]
        finally:
            await client.connection_pool.release(conn)
    finally:
        await client.aclose()


async def test_the_command_is_retried_and_answers(redis_url: str) -> None:
    client: Redis = connect(redis_url, max_connections=1)  # the one pooled connection is the raced one
    try:
        conn = await client.connection_pool.get_connection()
        hits = close_while_waiting(conn, times=1)
        await client.connection_pool.release(conn)
        assert await client.set("write-race-probe", "1", ex=30)
        assert hits == [1], "the command did not go through the raced connection"
    finally:
        await client.aclose()


async def test_other_errors_are_not_disguised(redis_url: str) -> None:
    """Only the transport's None errors become ConnectionError; a real bug still surfaces as itself."""
    client = connect(redis_url)
    try:
        conn = await client.connection_pool.get_connection()
        try:
            with pytest.raises(TypeError):
                await conn.send_packed_command(12345)  # type: ignore[arg-type]
        finally:
            await client.connection_pool.release(conn)
    finally:
        await client.aclose()


def test_under_uvloop_a_write_on_a_transport_closed_beneath_is_a_connection_error(redis_url: str) -> None:
    """The processes run on uvloop, where a transport closed under redis-py (a peer reset, a failover, a
    reshard) answers a write with RuntimeError('... the handler is closed'): seen ending a worker in the
    reshard test."""

    async def write_after_the_transport_closed() -> None:
        client = connect(redis_url)
        try:
            conn = await client.connection_pool.get_connection()
            try:
                await conn.send_command("PING")
                assert await conn.read_response() == "PONG"
                conn._writer.transport.close()  # type: ignore[union-attr]
                await asyncio.sleep(0)
                with pytest.raises(RedisConnectionError, match=CLOSED_WRITE):
                    await conn.send_command("PING")
            finally:
                await client.connection_pool.release(conn)
        finally:
            await client.aclose()

    uvloop.run(write_after_the_transport_closed())
