"""The LLM HTTP client: retries, key rotation, concurrency caps, cost ledger, metrics.

One ``aiohttp.ClientSession`` (passed in, or created here) serves every
call: aiohttp frames HTTP, on streams.http_pool's connections (at most 10
1xx answers skipped, a connection that received stray bytes while idle never
reused: another job's call would read them as its answer), pools connections per origin and never re-sends a POST on its
own. A call retries 429, 5xx, timeouts and transport errors with exponential
backoff and jitter, or a longer Retry-After (finite, capped at
``max_backoff_s``), within ``max_retries`` and ``retry_budget_s``; then it
raises ``LLMUnavailable``, which the worker counts as a failed attempt and
retries the job. A 429 cools the key down and the next key is tried at once.
The endpoint is untrusted: any 2xx is read as the answer; one over ``max_response_bytes``
(or coded, when identity was asked for) or of the wrong shape is a failed try like a 502,
its connection closed unread; of an error body at most 64 KiB is read.
Errors name the endpoint as ``host:port``, never its credentials or query,
and a provider's error text is cleaned of our keys before it is cut short.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import yarl

from agents.llm import metrics, providers
from agents.llm.errors import LLMRequestError, LLMUnavailable
from agents.llm.keys import ApiKey, KeyPool
from agents.llm.pricing import PriceTable
from agents.llm.providers import ChatResult, Reply
from agents.llm.redact import Redactor, surely_secret, url_secrets
from agents.llm.settings import LLMSettings
from agents.usage import record_usage
from streams.http_pool import FreshConnector, WireLimitExceeded
from streams.retry_after import parse_retry_after

log = logging.getLogger(__name__)

_KEYLIKE = re.compile(r"\b(?:sk|pk|key|api)[-_][A-Za-z0-9_\-*.]{6,}", re.IGNORECASE)
_AUTH_VALUE = re.compile(r"\b(Basic|Bearer)\s+[A-Za-z0-9+/=._~-]{4,}", re.IGNORECASE)  # a quoted Authorization header
UNAUTHORIZED_COOL_S = 300  # a key answered 401 is not sent again for this long (with other keys to send instead)
_RETRYABLE = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_ERROR_BODY_BYTES = 64 * 1024  # ample for a provider's error message; the rest is never read
_MESSAGE_CHARS = 160  # of a provider's error text, in our error
_REDACTED_CHARS = 1024  # of it redacted first: the kept 160 plus more than any key's length, and cheap to scan


@dataclass(frozen=True, slots=True)
class _Outcome:
    """One HTTP attempt, reduced to what the retry loop needs (no exception objects, no keys)."""

    status: str  # HTTP status code, "timeout" or "transport_error"
    reply: Reply | None = None
    retry_after_s: float | None = None
    detail: str = ""


class LLMClient:
    """Chat completions against ``settings.base_url`` (OpenAI-compatible or Anthropic)."""

    def __init__(
        self,
        settings: LLMSettings,
        *,
        http: aiohttp.ClientSession | None = None,
        prices: PriceTable | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if settings.base_url is None:
            raise ValueError("LLMClient needs a base_url; use OfflineModel without one")
        self.settings = settings
        self.model = settings.model
        self._url = yarl.URL(providers.endpoint(settings.base_url, settings.provider))
        self._url_secrets = url_secrets(self._url)  # a provider may quote them back in an error
        # and in an answer (a proxy that reports an error as a completion, an endpoint echoing its request): only what is
        # surely ours there, the URL's credentials and its long query values (a token, not an api-version date)
        self._answer_secrets = surely_secret(self._url)
        self.endpoint = f"{self._url.host}:{self._url.port}"  # what errors name: never credentials or the query
        if (self._url.user is not None or self._url.password is not None) and settings.provider == "openai" and settings.api_keys:
            self._url = self._url.with_user(None)  # the key's Bearer header is the authorization
        self.keys = KeyPool([k.get_secret_value() for k in settings.api_keys], max_concurrency=settings.max_concurrency)
        self._redactor = Redactor([(k.secret, k.label) for k in self.keys.keys if k.secret], self._url_secrets)
        self._prices = prices or PriceTable.load(settings.price_file, settings.prices)
        self._rng = rng or random.Random()
        self._owns_http = http is None
        self._http_session: aiohttp.ClientSession | None = http
        self._timeout = aiohttp.ClientTimeout(total=settings.timeout_s, sock_connect=settings.connect_timeout_s)

    @property
    def _http(self) -> aiohttp.ClientSession:
        """Created on first use, inside the running loop (a session belongs to one loop)."""
        if self._http_session is None:
            s = self.settings
            connector = FreshConnector(  # a stray answer is never the next call's, 1xx answers and wire bytes bounded
                max_body_bytes=s.max_response_bytes,
                limit=s.max_connections or len(self.keys.keys) * s.max_concurrency, limit_per_host=0,
                keepalive_timeout=30.0, ttl_dns_cache=60,
            )
            self._http_session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding"), raise_for_status=False, auto_decompress=False,
            )
        return self._http_session

    async def aclose(self) -> None:
        if self._owns_http and self._http_session is not None:
            await self._http_session.close()
            self._http_session = None

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: list[str] | None = None,
    ) -> ChatResult:
        """One completion, retried within the budget; adds its usage to the running job's ledger."""
        s = self.settings
        if s.provider == "anthropic":
            body = providers.anthropic_body(self.model, messages, tools, max_tokens or s.max_tokens, temperature, stop)
        else:
            body = providers.openai_body(self.model, messages, tools, max_tokens, temperature, stop)
        payload = orjson.dumps(body)
        started = time.monotonic()
        deadline = started + s.retry_budget_s
        attempts, last = 0, "no attempt made"
        while True:
            key = await self.keys.acquire(deadline)
            if key is None:
                cooling = self.keys.earliest_ready_in()
                why = (f"every API key is cooling down for {cooling:.1f}s more" if cooling > 0 else
                       f"every usable API key had its {s.max_concurrency} request(s) in flight (STREAMCREW_LLM_MAX_CONCURRENCY) "
                       f"until the {s.retry_budget_s:g}s budget ran out")
                last = f"{why} (after {last})"
                break
            attempts += 1
            try:
                outcome = await self._attempt(key, payload, offered_tools=bool(tools))
            finally:
                self.keys.release(key)
            if outcome.reply is not None:
                return self._result(outcome.reply)
            last = f"{outcome.detail} via {key.label}"
            status = int(outcome.status) if outcome.status.isdigit() else None
            if status == 401 and len(self.keys.keys) > 1:  # this key is revoked or mistyped, not the request wrong
                self.keys.cool_down(key, UNAUTHORIZED_COOL_S)
                log.warning("llm model=%s key=%s answered 401: benched %ds, the call goes on with the next key",
                            self.model, key.label, UNAUTHORIZED_COOL_S)
                if attempts > s.max_retries:
                    break
                continue
            if status is not None and status not in _RETRYABLE:
                raise LLMRequestError(f"{self.model}: provider refused the request: {last}", status)
            delay = min(s.max_backoff_s, s.backoff_s * 2 ** (attempts - 1)) * (0.5 + self._rng.random())
            if outcome.retry_after_s is not None:  # a longer wait is honoured; 0 or a past date must not make us hammer
                delay = max(delay, outcome.retry_after_s)
            log.debug("llm retry model=%s key=%s status=%s attempt=%d", self.model, key.label, outcome.status, attempts)
            if status == 429:  # on the last try too: the next call must not send the benched key
                self.keys.cool_down(key, delay)
            if attempts > s.max_retries:
                break
            if status == 429:
                continue  # the next key goes at once; acquire() waits if all are cooling
            if time.monotonic() + delay > deadline:
                last += f"; next retry in {delay:.1f}s is past the {s.retry_budget_s:g}s budget"
                break
            await asyncio.sleep(delay)
        raise LLMUnavailable(f"{self.model}: gave up after {attempts} attempt(s) in {time.monotonic() - started:.1f}s: {last}")

    async def _attempt(self, key: ApiKey, payload: bytes, *, offered_tools: bool) -> _Outcome:
        s = self.settings
        started = time.monotonic()
        headers = providers.headers(s.provider, key.secret, s.anthropic_version)
        try:
            async with self._http.post(self._url, data=payload, headers=headers, timeout=self._timeout,
                                       allow_redirects=False, auto_decompress=False) as response:
                if not 200 <= response.status <= 599:  # 000-099 (aiohttp skips 1xx): not an answer
                    response.close()  # and the connection is not reused
                    outcome = _Outcome("transport_error", detail=f"protocol error (status {response.status:03d}) at {self.endpoint}")
                else:
                    outcome = await self._receive(response, offered_tools)
        except aiohttp.ConnectionTimeoutError:  # a TimeoutError too: the connect timeout fired, not timeout_s
            outcome = _Outcome("timeout", detail=f"connect timeout after {s.connect_timeout_s:g}s at {self.endpoint}")
        except TimeoutError:
            outcome = _Outcome("timeout", detail=f"timeout after {s.timeout_s:g}s at {self.endpoint}")
        except aiohttp.ClientConnectorError as exc:
            reason = exc.os_error.strerror or type(exc.os_error).__name__
            outcome = _Outcome("transport_error", detail=f"cannot connect to {self.endpoint}: {reason}")
        except WireLimitExceeded as exc:  # tiny chunks, chunk extensions, a header flood: refused like a body too large
            outcome = _Outcome("502", detail=f"an answer over its wire limit ({exc.args[0]}; STREAMCREW_LLM_MAX_RESPONSE_BYTES) at {self.endpoint}")
        except aiohttp.ClientError as exc:
            outcome = _Outcome("transport_error", detail=f"transport error ({type(exc).__name__}) at {self.endpoint}")
        metrics.LLM_REQUESTS.labels(self.model, outcome.status).inc()
        metrics.LLM_LATENCY.labels(self.model).observe(time.monotonic() - started)
        return outcome

    async def _receive(self, response: aiohttp.ClientResponse, offered_tools: bool) -> _Outcome:
        code = response.status
        if not 200 <= code <= 299:  # any 2xx may carry the answer (a gateway's 201, a proxy's 203)
            body, _ = await _read_capped(response, _ERROR_BODY_BYTES)
            return self._refusal(code, response.headers, body)
        coding = response.headers.get("content-encoding", "").strip().lower()
        if coding not in ("", "identity"):  # a gzip bomb stays packed: we asked for identity and never unpack
            response.close()
            return _Outcome("502", detail=f"HTTP {code} with content-encoding {coding[:32]!r}, not the identity asked for")
        limit = self.settings.max_response_bytes
        too_large = _Outcome("502", detail=f"HTTP {code} with a body over the size limit of {limit} bytes (STREAMCREW_LLM_MAX_RESPONSE_BYTES)")
        if response.content_length is not None and response.content_length > limit:
            response.close()
            return too_large
        body, whole = await _read_capped(response, limit)
        return self._parse(code, body, offered_tools) if whole else too_large

    def _parse(self, code: int, body: bytes, offered_tools: bool) -> _Outcome:
        with _collector_paused():  # what is read is dropped before it is back
            return self._read(code, body, offered_tools)

    def _read(self, code: int, body: bytes, offered_tools: bool) -> _Outcome:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _Outcome("502", detail=f"HTTP {code} with a body that is not JSON")
        if not isinstance(data, dict):
            return _Outcome("502", detail=f"HTTP {code} with a body that is not a JSON object")
        anthropic = self.settings.provider == "anthropic"
        parse = providers.parse_anthropic if anthropic else providers.parse_openai
        try:
            reply = parse(data)
        except ValueError as exc:  # the message names the field, never the body
            return _Outcome("502", detail=f"HTTP {code} with {exc}")
        except Exception as exc:  # e.g. RecursionError: tool arguments 1,000 deep are JSON to orjson, not to json.dumps
            what = "message" if anthropic else "chat completion"
            return _Outcome("502", detail=f"HTTP {code} with a malformed {what} (reading it raised {type(exc).__name__})")
        if reply.tool_calls and not offered_tools:  # CrewAI's last round offers none: a list there failed the task
            if not reply.content:
                return _Outcome("502", detail=f"HTTP {code}: the model answered with a tool call when none was offered")
            reply = reply._replace(tool_calls=[])
        return _Outcome(str(code), reply=reply)

    def _refusal(self, code: int, headers: Any, content: bytes) -> _Outcome:
        retry_after = _retry_after_s(headers, self.settings.max_backoff_s)
        # redacted, then cut: a key that starts in the kept characters lies whole in the redacted ones
        message = self._redact(_error_message(content)[:_REDACTED_CHARS])[:_MESSAGE_CHARS]
        return _Outcome(str(code), retry_after_s=retry_after, detail=f"HTTP {code}" + (f" ({message})" if message else ""))

    def _redact(self, text: str) -> str:
        """Providers quote (partly masked) keys in 401 bodies: ours become their label, any
        8-character run of one is masked, and anything key-shaped goes too."""
        text = self._redactor(text)  # keys, the endpoint URL's credentials and query values, and runs of them
        return _AUTH_VALUE.sub(r"\1 [redacted]", _KEYLIKE.sub("[redacted]", text))

    def _result(self, reply: Reply) -> ChatResult:
        cost = self._prices.cost(self.model, reply.prompt_tokens, reply.completion_tokens) if reply.counted else None
        metrics.record_call(self.model, reply.prompt_tokens, reply.completion_tokens, cost)
        record_usage(self.model, reply.prompt_tokens, reply.completion_tokens, cost)
        content = None if reply.content is None else self._scrub(reply.content)
        calls = [self._scrub_call(c) for c in reply.tool_calls]
        return ChatResult(content, self.model, reply.prompt_tokens, reply.completion_tokens, cost, calls, reply.finish_reason)

    def _scrub_call(self, call: dict[str, Any]) -> dict[str, Any]:
        """A tool call's id and name are the model's text as much as its arguments: an endpoint echoing its request put
        the key in both, and CrewAI quotes a call it cannot use in the job's error."""
        fn = call["function"]
        return {**call, "id": None if call["id"] is None else self._scrub(call["id"]),
                "function": {**fn, "name": self._scrub(fn["name"]), "arguments": self._scrub(fn["arguments"])}}

    def _scrub(self, text: str) -> str:
        """An answer's text without our API keys (their labels instead) or the endpoint URL's secrets: it goes to the
        job's result, record and webhook, which tenants and receivers read."""
        for key in self.keys.keys:
            if key.secret and key.secret in text:
                text = text.replace(key.secret, key.label)
        for secret in self._answer_secrets:
            if secret in text:
                text = text.replace(secret, "[redacted]")
        return text


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while an answer is read. A 2 MiB answer of 1.6 M tiny JSON lists
    (``[[]],[[]],...`` in a field we never read) made it run some 2,300 times over the growing tree: 330 - 480 ms of
    the event loop per answer, 40 ms without. A parsed answer holds no cycles: reference counting frees it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


async def _read_capped(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """The body's first ``limit`` bytes, and whether that is all of it; a longer body's connection is closed."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            response.close()
            return b"".join(chunks)[:limit], False
    return b"".join(chunks), True


def _retry_after_s(headers: Any, cap_s: float) -> float | None:
    """The provider's wait, capped: ``retry-after-ms`` if it is a number >= 0, else ``Retry-After``.
    A negative or garbled ``retry-after-ms`` is ignored, not read as 0: it must not override a good ``Retry-After``."""
    try:
        ms = float(headers.get("retry-after-ms") or "nan")
    except ValueError:
        ms = math.nan
    if math.isfinite(ms) and ms >= 0:
        return min(ms / 1000, cap_s)
    return parse_retry_after(headers.get("retry-after"), cap_s=cap_s)


def _error_message(content: bytes) -> str:
    """The provider's own error text, uncut: ``_refusal`` cuts it short only after redacting it."""
    try:
        error = orjson.loads(content).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
    message = error.get("message") if isinstance(error, dict) else error
    return str(message) if message else ""
