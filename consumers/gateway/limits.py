"""The request-body cap, as raw ASGI middleware: a declared Content-Length over the cap is refused
before any byte is read, and a chunked body is cut off as soon as it passes the cap."""

from __future__ import annotations

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from consumers.gateway.errors import error_response


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` once a body passes the cap; FastAPI re-raises HTTPExceptions from body reads."""

    error_code = "body_too_large"

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body is over the {max_bytes}-byte limit")


class BodyLimit:
    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared == -1:  # uvicorn answers these 400 itself, before the app; this is for a server that passes one on
            await error_response(400, "bad_request", "invalid Content-Length header")(scope, receive, send)
            return
        if declared is not None and declared > self.max_bytes:
            exc = BodyTooLarge(self.max_bytes)
            await error_response(413, exc.error_code, exc.detail, headers={"Connection": "close"})(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited, send)


def _content_length(scope: Scope) -> int | None:
    """The declared length, None when absent, -1 when not a number."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
    return None
