"""Just enough HTTP/1.1 for a webhook client: serialise a POST, read one response (RFC 9112 §6.3 framing).

Bodies are skimmed up to a cap; a response that is cut short, delimited by
close, or marked ``Connection: close`` leaves its connection unusable.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

Headers = list[tuple[bytes, bytes]]


def _unsafe(part: bytes) -> bool:
    return b"\r" in part or b"\n" in part or b"\0" in part


class ProtocolError(Exception):
    """Raised when a response is not valid HTTP/1.x, or a request part would break the framing."""


@dataclass(slots=True)
class Answer:
    status: int
    reason: str
    headers: Headers
    body: bytes
    reusable: bool


def encode_request(method: str, target: bytes, headers: Headers, body: bytes) -> bytes:
    """The request bytes; refuses CR/LF in any part (header injection)."""
    if _unsafe(target) or b" " in target:
        raise ProtocolError("CR, LF or space in the request target")
    lines = [b"%s %s HTTP/1.1" % (method.encode("ascii"), target)]
    has_length = False
    for name, value in headers:
        if _unsafe(name + value):
            raise ProtocolError(f"CR or LF in header {name[:40]!r}")
        has_length = has_length or name.lower() == b"content-length"
        lines.append(name + b": " + value)
    if not has_length:
        lines.append(b"content-length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def read_response(reader: asyncio.StreamReader, *, max_body: int) -> Answer:
    """Read one final response (1xx skipped). EOF before the first byte raises ``IncompleteReadError``."""
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise ProtocolError("response head too large") from None
        version, status, reason, headers = _parse_head(head)
        if status >= 200:
            break
        if status == 101:
            raise ProtocolError("unexpected 101 Switching Protocols")
    tokens = {t.strip().lower() for v in _values(headers, b"connection") for t in v.split(b",")}
    reusable = version == b"HTTP/1.1" and b"close" not in tokens
    if status in (204, 304):
        return Answer(status, reason, headers, b"", reusable)
    if encodings := _values(headers, b"transfer-encoding"):
        if encodings[-1].split(b",")[-1].strip().lower() != b"chunked":
            return Answer(status, reason, headers, await _until_close(reader, max_body), False)
        body, complete = await _chunked(reader, max_body)
        return Answer(status, reason, headers, body, reusable and complete)
    if lengths := _values(headers, b"content-length"):
        if len(set(lengths)) != 1 or not lengths[0].isdigit():
            raise ProtocolError(f"bad content-length {lengths!r}")
        length = int(lengths[0])
        body = await reader.readexactly(min(length, max_body))
        return Answer(status, reason, headers, body, reusable and length <= max_body)
    return Answer(status, reason, headers, await _until_close(reader, max_body), False)


def _parse_head(head: bytes) -> tuple[bytes, int, str, Headers]:
    status_line, *lines = head[:-4].split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or len(parts[1]) != 3 or not parts[1].isdigit():
        raise ProtocolError(f"bad status line {status_line[:100]!r}")
    headers: Headers = []
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise ProtocolError(f"bad header line {line[:100]!r}")
        headers.append((name, value.strip(b" \t")))
    reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
    return parts[0], int(parts[1]), reason, headers


def _values(headers: Headers, name: bytes) -> list[bytes]:
    return [v for k, v in headers if k.lower() == name]


async def _chunked(reader: asyncio.StreamReader, max_body: int) -> tuple[bytes, bool]:
    """Decode a chunked body; returns ``(body, complete)`` (not complete when cut at ``max_body``)."""
    body = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size {line[:40]!r}") from None
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return bytes(body), True
        if len(body) + size > max_body:
            body += await reader.readexactly(max_body - len(body))
            return bytes(body), False
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise ProtocolError("chunk not followed by CRLF")


async def _until_close(reader: asyncio.StreamReader, max_body: int) -> bytes:
    body = bytearray()
    while len(body) < max_body and (data := await reader.read(max_body - len(body))):
        body += data
    return bytes(body)
