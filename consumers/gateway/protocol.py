"""uvicorn's httptools protocol with a bound on a request head's size, time and number of header fields.

uvicorn bounds neither: before any key is checked, one connection sending an endless header grew the
gateway by the header's size (300 MiB seen) and, re-parsing the growing value, held its event loop for
seconds at a time (every other client's requests waited); and a connection that never finishes its
head (or never sends a byte) stayed open for good, one file descriptor each, until the gateway had none
left. Nor does it bound how many header fields a head holds: 64 KiB of ``a:\r\n`` is ~16,000 fields, each a Python
call in uvicorn and a tuple that Starlette and the gateway's middleware scan again (50 such heads at once held another
tenant's status read up to 0.6 - 0.9 s, answered 401 in the end). The parsing stays httptools'; this only counts what
arrives before a head completes, and when, and the fields httptools hands over.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# A request line and headers past this are refused (431): nginx's default buffers hold 8 KiB + 4 x 8 KiB.
MAX_HEAD_BYTES = 64 * 1024

# Header fields one request may have (a chunked body's trailer fields count with them); one more is refused (431) and
# the connection closed, its other fields never parsed. Apache (LimitRequestFields), gunicorn (limit_request_fields) and
# Tomcat (maxHeaderCount) refuse past 100 too; uvicorn and h11 count none (h11 bounds only the head's bytes, 16 KiB);
# Node keeps the first 2,000 and drops the rest (maxHeadersCount), which still parses them all. Clients send ~5 - 20
# (a browser ~15, each proxy on the way adds a few X-Forwarded-* / Via / tracing fields): 100 leaves room for any chain.
MAX_HEADERS = 100


class _TooManyHeaders(Exception):
    """Raised from ``on_header`` past :data:`MAX_HEADERS`, once the 431 is written: httptools stops parsing at a
    callback's exception (the rest of the read is never looked at) and raises it on as an ``HttpParserError``, which
    uvicorn logs ("Invalid HTTP request received.") and answers with ``send_400_response``, a no-op here by then."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """A request head (request line and headers) may take :data:`MAX_HEAD_BYTES`, and ``head_timeout_s`` from its
    first byte (or from the connection's opening) until it is complete; a request may have :data:`MAX_HEADERS`
    header fields."""

    head_timeout_s = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # until a head completes: a fresh connection awaits its first
        self._head_bytes = 0
        self._began = False  # a head began in the chunk being read
        self._head_timer: asyncio.TimerHandle | None = None
        self._fields = 0  # header fields of the request being parsed (trailer fields too)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._began = False
        super().data_received(data)
        if self._in_head and not self.transport.is_closing():
            # A chunk in which a head began may hold earlier pipelined requests too: counted from the next chunk on
            # (a head can pass the limit by one read's bytes); every byte of a later chunk is head.
            self._head_bytes += 0 if self._began else len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(b"431 Request Header Fields Too Large", f"request head over {MAX_HEAD_BYTES} bytes")
            elif self._head_timer is None:  # a head that did not come whole: timed from here (one that did costs no timer)
                self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes, self._began, self._fields = True, 0, True, 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        if self._fields > MAX_HEADERS:
            cycle = self.cycle
            if not self._in_head and cycle is not None and cycle.response_started:
                self._disarm()  # trailers of a request already answered (or being answered): no status line may follow
                self.transport.close()
            else:
                self._refuse(b"431 Request Header Fields Too Large", f"request has over {MAX_HEADERS} header fields")
            raise _TooManyHeaders
        super().on_header(name, value)

    def send_400_response(self, msg: str) -> None:
        if self.transport.is_closing():  # refused above (431): a 400 written now would still go out after it
            return
        super().send_400_response(msg)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        super().on_headers_complete()

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self._refuse(b"408 Request Timeout", f"request head not complete within {self.head_timeout_s:g}s")

    def _refuse(self, status: bytes, message: str) -> None:
        """Answer ``status`` and close: what is left of the head is never read."""
        self._disarm()
        self._in_head = False
        body = message.encode("ascii")
        self.transport.write(b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain; charset=utf-8\r\n"
                             b"content-length: " + str(len(body)).encode("ascii") + b"\r\nconnection: close\r\n\r\n" + body)
        self.transport.close()


def bounded_protocol(head_timeout_s: float) -> type[BoundedHttpToolsProtocol]:
    """The protocol class for uvicorn (which builds one per connection), with ``STREAMCREW_HEAD_TIMEOUT_S``."""
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {"head_timeout_s": head_timeout_s})
