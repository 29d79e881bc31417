"""aiohttp's connection pool, hardened against peers that answer more than they were asked (webhook receivers, LLM
endpoints): both the notifier and the LLM client use it.

aiohttp speaks HTTP (llhttp parser, keep-alive pool); these only refuse what it allows: reusing a pooled
connection that received bytes while idle, skipping interim (1xx) answers without limit, and (with a body limit)
an answer whose bytes on the wire are far more than its body.
"""

from __future__ import annotations

import functools
from typing import Any, cast

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.http import HttpProcessingError, RawResponseMessage
from aiohttp.streams import StreamReader

MAX_INTERIM = 10  # interim (1xx) answers one request may get before its status; more is a protocol error
WIRE_SLACK = 64 * 1024  # of an answer's wire bytes beyond its body: its head and chunk framing (plus 1/16 of the limit)


class WireLimitExceeded(aiohttp.ClientPayloadError):
    """Raised to a request whose answer took more bytes on the wire than its body limit allows (see InterimBound)."""


def wire_slack(max_body_bytes: int) -> int:
    """Bytes an answer may take on the wire beyond its body: a head, and chunk framing of chunks of a few hundred
    bytes or more (8 bytes of framing a chunk)."""
    return WIRE_SLACK + max_body_bytes // 16


class InterimBound(ResponseHandler):
    """aiohttp's protocol, failing a request that gets more than ``MAX_INTERIM`` interim (1xx) answers, or (given
    ``max_body_bytes``) whose answer's wire bytes pass its body bytes, or that limit, by more than ``wire_slack``.

    ``ClientResponse.start`` skips interim answers in a loop without limit: a receiver streaming
    ``102 Processing`` as fast as we read kept a core busy for the whole attempt (a webhook delivery, an LLM
    call's try), every other delivery or job of the process waiting for it. Past the bound the request fails as a protocol error, the connection is closed, and the rest of
    what it sent is dropped unread.
    A body limit counts body bytes only: a valid 2 MiB answer sent in 1-byte chunks (12 MiB of wire) cost 2.1 s of
    CPU to parse, and chunk extensions of 60 kB a body byte never reached the limit at all, running to the timeout.
    """

    def __init__(self, loop: Any, max_body_bytes: int | None = None) -> None:
        super().__init__(loop)
        self._interim = 0
        self._max_body = max_body_bytes
        self._slack = 0 if max_body_bytes is None else wire_slack(max_body_bytes)
        self._wire = 0
        self._earlier: StreamReader | None = None

    def set_response_params(self, **kwargs: Any) -> None:
        """Called once per request: its answer's wire bytes are counted from here (the last answer's body is not its)."""
        self._wire, self._earlier = 0, self._payload
        super().set_response_params(**kwargs)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._max_body is None or self.transport is None:
            return
        self._wire += len(data)
        payload = self._payload
        body = payload.total_bytes if payload is not None and payload is not self._earlier else 0
        if self._wire - body > self._slack or self._wire > self._max_body + self._slack:
            exc = WireLimitExceeded(
                f"{self._wire} bytes on the wire for {body} bytes of body, more than a body limit of {self._max_body} bytes "
                f"and {self._slack} for the head and chunk framing allow")
            self.close()  # no more parsed; the payload is let go first, so the closing does not fail it again
            self.set_exception(exc)  # a head still awaited
            if payload is not None and payload is not self._earlier:
                payload.set_exception(exc)

    def feed_data(self, data: tuple[RawResponseMessage, StreamReader], size: int = 0) -> None:
        if self._interim > MAX_INTERIM:
            return
        code = data[0].code
        if 100 <= code < 200 and code != 101:  # as ClientResponse.start tells interim from final
            self._interim += 1
            if self._interim > MAX_INTERIM:
                self.set_exception(HttpProcessingError(message=f"more than {MAX_INTERIM} interim (1xx) answers before the status"))
                if self.transport is not None:
                    self.transport.close()
                return
        else:
            self._interim = 0
        super().feed_data(data, size)


class FreshConnector(aiohttp.TCPConnector):
    """Never hands out a pooled connection that received bytes while idle.

    A peer that answers one request twice leaves a response in an idle
    connection's buffer; aiohttp checks that when a connection is released,
    but not when bytes arrive later, before reuse. Reusing it would credit
    that stray response to the next request (the next delivery; the next LLM
    call, another job's, another tenant's); the connection is closed instead.
    Its connections speak :class:`InterimBound`, which bounds an answer's wire bytes when given ``max_body_bytes``.
    """

    def __init__(self, *, max_body_bytes: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._factory = cast("functools.partial[ResponseHandler]",
                             functools.partial(InterimBound, loop=self._loop, max_body_bytes=max_body_bytes))

    async def _get(self, key: Any, traces: Any) -> Any:
        while (conn := await super()._get(key, traces)) is not None:
            protocol = conn.protocol
            if protocol is not None and not protocol.should_close:
                return conn
            conn.close()
        return None
