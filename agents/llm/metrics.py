"""LLM metrics (contract §8), in prometheus_client's default registry."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

LLM_REQUESTS = Counter("streamcrew_llm_requests", "LLM HTTP requests by outcome (HTTP status, timeout, transport_error, offline)", ["model", "status"])
LLM_TOKENS = Counter("streamcrew_llm_tokens", "LLM tokens by kind (prompt, completion)", ["model", "kind"])
LLM_COST = Counter("streamcrew_llm_cost_usd", "LLM cost in USD, where the model's price is known", ["model"])
LLM_LATENCY = Histogram(
    "streamcrew_llm_latency_seconds",
    "Seconds per LLM HTTP request",
    ["model"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120),
)


def record_call(model: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None) -> None:
    LLM_TOKENS.labels(model, "prompt").inc(prompt_tokens)
    LLM_TOKENS.labels(model, "completion").inc(completion_tokens)
    if cost_usd is not None:
        LLM_COST.labels(model).inc(cost_usd)
