"""uvicorn's httptools protocol with a bound on a request head's size and time.

uvicorn bounds neither: before any key is checked, one connection sending an endless header grew the
gateway by the header's size (300 MiB seen) and, re-parsing the growing value, held its event loop for
seconds at a time (every other client's requests waited); and a connection that never finishes its
head (or never sends a byte) stayed open for good, one file descriptor each, until the gateway had none
left. The parsing stays httptools'; this only counts what arrives before a head completes, and when.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# A request line and headers past this are refused (431): nginx's default buffers hold 8 KiB + 4 x 8 KiB.
MAX_HEAD_BYTES = 64 * 1024


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """A request head (request line and headers) may take :data:`MAX_HEAD_BYTES`, and ``head_timeout_s`` from its
    first byte (or from the connection's opening) until it is complete."""

    head_timeout_s = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # until a head completes: a fresh connection awaits its first
        self._head_bytes = 0
        self._began = False  # a head began in the chunk being read
        self._head_timer: asyncio.TimerHandle | None = None

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
        self._in_head, self._head_bytes, self._began = True, 0, True

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
