"""The LLM HTTP client: retries, key rotation, concurrency caps, cost ledger, metrics.

One ``aiohttp.ClientSession`` (passed in, or created here) serves every
call: aiohttp frames HTTP (1xx answers skipped, a connection with stray bytes
never reused), pools connections per origin and never re-sends a POST on its
own. A call retries 429, 5xx, timeouts and transport errors with exponential
backoff and jitter, honouring Retry-After (finite, capped at
``max_backoff_s``), within ``max_retries`` and ``retry_budget_s``; then it
raises ``LLMUnavailable``, which the worker counts as a failed attempt and
retries the job. A 429 cools the key down and the next key is tried at once.
Errors name the endpoint as ``host:port``, never its credentials or query.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import yarl

from agents.llm import metrics, providers
from agents.llm.errors import LLMRequestError, LLMUnavailable
from agents.llm.keys import ApiKey, KeyPool
from agents.llm.pricing import PriceTable
from agents.llm.providers import ChatResult
from agents.llm.settings import LLMSettings
from agents.usage import record_usage
from streams.retry_after import parse_retry_after

log = logging.getLogger(__name__)

_KEYLIKE = re.compile(r"\b(?:sk|pk|key|api)[-_][A-Za-z0-9_\-*.]{6,}", re.IGNORECASE)
_RETRYABLE = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True, slots=True)
class _Outcome:
    """One HTTP attempt, reduced to what the retry loop needs (no exception objects, no keys)."""

    status: str  # HTTP status code, "timeout" or "transport_error"
    data: dict[str, Any] | None = None
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
        self.endpoint = f"{self._url.host}:{self._url.port}"  # what errors name: never credentials or the query
        if self._url.user is not None and settings.provider == "openai" and settings.api_keys:
            self._url = self._url.with_user(None)  # the key's Bearer header is the authorization
        self.keys = KeyPool([k.get_secret_value() for k in settings.api_keys], max_concurrency=settings.max_concurrency)
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
            connector = aiohttp.TCPConnector(
                limit=s.max_connections or len(self.keys.keys) * s.max_concurrency, limit_per_host=0,
                keepalive_timeout=30.0, ttl_dns_cache=60,
            )
            self._http_session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding"), raise_for_status=False,
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
                last = f"every API key is cooling down for {self.keys.earliest_ready_in():.1f}s more (after {last})"
                break
            attempts += 1
            try:
                outcome = await self._attempt(key, payload)
            finally:
                self.keys.release(key)
            if outcome.data is not None:
                return self._result(outcome.data)
            last = f"{outcome.detail} via {key.label}"
            status = int(outcome.status) if outcome.status.isdigit() else None
            if status is not None and status not in _RETRYABLE:
                raise LLMRequestError(f"{self.model}: provider refused the request: {last}", status)
            backoff = min(s.max_backoff_s, s.backoff_s * 2 ** (attempts - 1)) * (0.5 + self._rng.random())
            log.debug("llm retry model=%s key=%s status=%s attempt=%d", self.model, key.label, outcome.status, attempts)
            if attempts > s.max_retries:
                break
            if status == 429:
                self.keys.cool_down(key, outcome.retry_after_s if outcome.retry_after_s is not None else backoff)
                continue  # the next key goes at once; acquire() waits if all are cooling
            delay = outcome.retry_after_s if outcome.retry_after_s is not None else backoff
            if time.monotonic() + delay > deadline:
                last += f"; next retry in {delay:.1f}s is past the {s.retry_budget_s:g}s budget"
                break
            await asyncio.sleep(delay)
        raise LLMUnavailable(f"{self.model}: gave up after {attempts} attempt(s) in {time.monotonic() - started:.1f}s: {last}")

    async def _attempt(self, key: ApiKey, payload: bytes) -> _Outcome:
        s = self.settings
        started = time.monotonic()
        headers = providers.headers(s.provider, key.secret, s.anthropic_version)
        try:
            async with self._http.post(self._url, data=payload, headers=headers, timeout=self._timeout,
                                       allow_redirects=False) as response:
                if not 200 <= response.status <= 599:  # 000-099 (aiohttp skips 1xx): not an answer
                    response.close()  # and the connection is not reused
                    outcome = _Outcome("transport_error", detail=f"protocol error (status {response.status:03d}) at {self.endpoint}")
                else:
                    outcome = self._read(response.status, response.headers, await response.read())
        except TimeoutError:
            outcome = _Outcome("timeout", detail=f"timeout after {s.timeout_s:g}s at {self.endpoint}")
        except aiohttp.ClientConnectorError as exc:
            reason = exc.os_error.strerror or type(exc.os_error).__name__
            outcome = _Outcome("transport_error", detail=f"cannot connect to {self.endpoint}: {reason}")
        except aiohttp.ClientError as exc:
            outcome = _Outcome("transport_error", detail=f"transport error ({type(exc).__name__}) at {self.endpoint}")
        metrics.LLM_REQUESTS.labels(self.model, outcome.status).inc()
        metrics.LLM_LATENCY.labels(self.model).observe(time.monotonic() - started)
        return outcome

    def _read(self, code: int, headers: Any, content: bytes) -> _Outcome:
        if code == 200:
            try:
                data = orjson.loads(content)
            except orjson.JSONDecodeError:
                return _Outcome("502", detail="HTTP 200 with a body that is not JSON")
            if isinstance(data, dict):
                return _Outcome("200", data=data)
            return _Outcome("502", detail="HTTP 200 with a body that is not a JSON object")
        cap = self.settings.max_backoff_s
        retry_after = None
        if "retry-after-ms" in headers:
            ms = parse_retry_after(headers["retry-after-ms"], cap_s=cap * 1000)
            retry_after = ms / 1000 if ms is not None else None
        if retry_after is None:
            retry_after = parse_retry_after(headers.get("retry-after"), cap_s=cap)
        return _Outcome(str(code), retry_after_s=retry_after, detail=f"HTTP {code}{self._redact(_error_message(content))}")

    def _redact(self, text: str) -> str:
        """Providers quote (partly masked) keys in 401 bodies: strip ours and anything key-shaped."""
        for key in self.keys.keys:
            if key.secret:
                text = text.replace(key.secret, key.label)
        return _KEYLIKE.sub("[redacted]", text)

    def _result(self, data: dict[str, Any]) -> ChatResult:
        parse = providers.parse_anthropic if self.settings.provider == "anthropic" else providers.parse_openai
        content, calls, finish, prompt_tokens, completion_tokens = parse(data)
        cost = self._prices.cost(self.model, prompt_tokens, completion_tokens)
        metrics.record_call(self.model, prompt_tokens, completion_tokens, cost)
        record_usage(self.model, prompt_tokens, completion_tokens, cost)
        return ChatResult(content, self.model, prompt_tokens, completion_tokens, cost, calls, finish)


def _error_message(content: bytes) -> str:
    """The provider's own error text, short; providers do not echo keys in error bodies."""
    try:
        error = orjson.loads(content).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
    message = error.get("message") if isinstance(error, dict) else error
    return f" ({str(message)[:160]})" if message else ""
