"""The LLM HTTP client: retries, key rotation, concurrency caps, cost ledger, metrics.

One ``httpx.AsyncClient`` (passed in, or created over ``PooledTransport``)
serves every call. A call retries 429, 5xx, timeouts and transport errors
with exponential backoff and jitter, honouring Retry-After, within
``max_retries`` and ``retry_budget_s``; then it raises ``LLMUnavailable``,
which the worker counts as a failed attempt and retries the job. A 429 cools
the key down and the next key is tried at once.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import re
import time
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from agents.llm import metrics, providers
from agents.llm.errors import LLMRequestError, LLMUnavailable
from agents.llm.keys import ApiKey, KeyPool
from agents.llm.pricing import PriceTable
from agents.llm.providers import ChatResult
from agents.llm.settings import LLMSettings
from agents.llm.transport import PooledTransport
from agents.usage import record_usage

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


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a Retry-After header: delta-seconds (fractions accepted) or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class LLMClient:
    """Chat completions against ``settings.base_url`` (OpenAI-compatible or Anthropic)."""

    def __init__(
        self,
        settings: LLMSettings,
        *,
        http: httpx.AsyncClient | None = None,
        prices: PriceTable | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if settings.base_url is None:
            raise ValueError("LLMClient needs a base_url; use OfflineModel without one")
        self.settings = settings
        self.model = settings.model
        self._url = providers.endpoint(settings.base_url, settings.provider)
        self.keys = KeyPool([k.get_secret_value() for k in settings.api_keys], max_concurrency=settings.max_concurrency)
        self._prices = prices or PriceTable.load(settings.price_file, settings.prices)
        self._rng = rng or random.Random()
        self._owns_http = http is None
        self._http = http or self._default_http(settings, len(self.keys.keys))
        self._timeout = httpx.Timeout(settings.timeout_s, connect=settings.connect_timeout_s, pool=settings.retry_budget_s)

    @staticmethod
    def _default_http(settings: LLMSettings, n_keys: int) -> httpx.AsyncClient:
        max_connections = settings.max_connections or n_keys * settings.max_concurrency
        return httpx.AsyncClient(transport=PooledTransport(max_connections=max_connections), follow_redirects=False)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

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
        try:
            response = await self._http.post(self._url, content=payload, headers=providers.headers(s.provider, key.secret, s.anthropic_version), timeout=self._timeout)
        except httpx.TimeoutException as exc:
            outcome = _Outcome("timeout", detail=f"timeout ({type(exc).__name__})")
        except httpx.TransportError as exc:
            outcome = _Outcome("transport_error", detail=f"transport error ({type(exc).__name__})")
        else:
            outcome = self._read(response)
        metrics.LLM_REQUESTS.labels(self.model, outcome.status).inc()
        metrics.LLM_LATENCY.labels(self.model).observe(time.monotonic() - started)
        return outcome

    def _read(self, response: httpx.Response) -> _Outcome:
        code = response.status_code
        if code == 200:
            try:
                data = orjson.loads(response.content)
            except orjson.JSONDecodeError:
                return _Outcome("502", detail="HTTP 200 with a body that is not JSON")
            if isinstance(data, dict):
                return _Outcome("200", data=data)
            return _Outcome("502", detail="HTTP 200 with a body that is not a JSON object")
        retry_after = None
        if "retry-after-ms" in response.headers:
            try:
                retry_after = float(response.headers["retry-after-ms"]) / 1000
            except ValueError:
                retry_after = None
        retry_after = retry_after if retry_after is not None else parse_retry_after(response.headers.get("retry-after"))
        return _Outcome(str(code), retry_after_s=retry_after, detail=f"HTTP {code}{self._redact(_error_message(response))}")

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


def _error_message(response: httpx.Response) -> str:
    """The provider's own error text, short; providers do not echo keys in error bodies."""
    try:
        error = orjson.loads(response.content).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
    message = error.get("message") if isinstance(error, dict) else error
    return f" ({str(message)[:160]})" if message else ""
