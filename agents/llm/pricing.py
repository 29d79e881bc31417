"""USD per million tokens, per model: a seed table, a JSON file, then explicit overrides.

An unknown model costs ``None`` (reported as unknown), never a guess. The seed
holds the first design's 2026 table and the GPT-4o snapshots at OpenAI's list
prices, so the design's "DeepSeek V3.2 at $0.42 against GPT-4o at $15/MTok"
(the output price of ``gpt-4o-2024-05-13``) can be reproduced.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Price:
    prompt_per_m: float
    completion_per_m: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt_per_m + completion_tokens * self.completion_per_m) / 1_000_000


SEED_PRICES: Mapping[str, Price] = {
    "deepseek-v3.2": Price(0.42, 0.42),
    "gpt-4.1": Price(8.0, 8.0),
    "claude-sonnet-4.5": Price(15.0, 15.0),
    "gemini-2.5-flash": Price(2.50, 2.50),
    # GPT-4o at OpenAI's list prices per snapshot; the bare alias points at 2024-08-06.
    "gpt-4o-2024-05-13": Price(5.0, 15.0),
    "gpt-4o-2024-08-06": Price(2.50, 10.0),
    "gpt-4o-2024-11-20": Price(2.50, 10.0),
    "gpt-4o": Price(2.50, 10.0),
}


def _price(model: str, value: Any) -> Price:
    """A price of finite, non-negative amounts: a negative cost would make every call fail after the
    provider answered (a Prometheus counter cannot go down), and NaN or infinity would poison the cost metric."""
    try:
        if isinstance(value, Mapping):
            price = Price(float(value["prompt"]), float(value["completion"]))
        else:
            prompt, completion = value
            price = Price(float(prompt), float(completion))
    except (KeyError, TypeError, ValueError):
        price = None
    if price is None or not all(math.isfinite(x) and x >= 0 for x in (price.prompt_per_m, price.completion_per_m)):
        raise ConfigError(f"price for {model!r} must be [prompt, completion] or {{'prompt': x, 'completion': y}} "
                          "USD per million tokens, each a finite number >= 0")
    return price


class PriceTable:
    """Model name to ``Price``; lookups also try the name without a ``provider/`` prefix."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self._prices = dict(SEED_PRICES if prices is None else prices)

    @classmethod
    def load(cls, price_file: Path | None = None, overrides: Mapping[str, Any] | None = None) -> PriceTable:
        prices = dict(SEED_PRICES)
        if price_file is not None:
            try:
                raw = json.loads(Path(price_file).read_text())
            except (OSError, ValueError) as exc:
                raise ConfigError(f"cannot read price file {price_file}: {exc}") from None
            if not isinstance(raw, dict):
                raise ConfigError(f"price file {price_file} must hold a JSON object")
            prices.update({model: _price(model, value) for model, value in raw.items()})
        prices.update({model: _price(model, value) for model, value in (overrides or {}).items()})
        return cls(prices)

    def get(self, model: str) -> Price | None:
        return self._prices.get(model) or self._prices.get(model.rsplit("/", 1)[-1])

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        price = self.get(model)
        return None if price is None else price.cost(prompt_tokens, completion_tokens)
