"""aiohttp's connection pool, hardened against peers that answer more than they were asked (webhook receivers, LLM
endpoints): both the notifier and the LLM client use it.

aiohttp speaks HTTP (llhttp parser, keep-alive pool); these only refuse two things it allows: reusing a pooled
connection that received bytes while idle, and skipping interim (1xx) answers without limit.
"""

from __future__ import annotations

import functools
from typing import Any, cast

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.http import HttpProcessingError, RawResponseMessage
from aiohttp.streams import StreamReader

MAX_INTERIM = 10  # interim (1xx) answers one request may get before its status; more is a protocol error


class InterimBound(ResponseHandler):
    """aiohttp's protocol, failing a request that gets more than ``MAX_INTERIM`` interim (1xx) answers.

    ``ClientResponse.start`` skips interim answers in a loop without limit: a receiver streaming
    ``102 Processing`` as fast as we read kept a core busy for the whole attempt (a webhook delivery, an LLM
    call's try), every other delivery or job of the process waiting for it. Past the bound the request fails as a protocol error, the connection is closed, and the rest of
    what it sent is dropped unread.
    """

    def __init__(self, loop: Any) -> None:
        super().__init__(loop)
        self._interim = 0

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
    Its connections speak :class:`InterimBound`.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._factory = cast("functools.partial[ResponseHandler]", functools.partial(InterimBound, loop=self._loop))

    async def _get(self, key: Any, traces: Any) -> Any:
        while (conn := await super()._get(key, traces)) is not None:
            protocol = conn.protocol
            if protocol is not None and not protocol.should_close:
                return conn
            conn.close()
        return None
