"""LLM settings, read once at the edge (``STREAMCREW_LLM_*``) and passed down."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from agents.llm.pricing import PriceTable
from streams.errors import ConfigError


class LLMSettings(BaseSettings):
    """How LLM agents reach a model. ``base_url=None`` selects the built-in offline model."""

    model_config = SettingsConfigDict(env_prefix="STREAMCREW_LLM_", extra="ignore", hide_input_in_errors=True)  # inputs hold keys

    base_url: str | None = Field(
        None,
        description="endpoint, e.g. https://api.deepseek.com/v1 (OpenAI-compatible) or https://api.anthropic.com; unset: the built-in offline model",
    )
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="comma-separated API keys, taken in turn; a key answered 429 cools down while the next is used; never logged",
    )
    model: str = Field(
        "deepseek-v3.2",
        description="model name sent to the endpoint; also the name looked up in the price table",
    )
    provider: Literal["openai", "anthropic"] = Field(
        "openai",
        description="wire format: openai (POST .../v1/chat/completions) or anthropic (POST .../v1/messages); /v1 is added when base_url lacks it",
    )
    timeout_s: float = Field(
        60.0, gt=0,
        description="seconds one HTTP request may take in all, connecting included; one hung request holds a call this long",
    )
    connect_timeout_s: float = Field(
        10.0, gt=0,
        description="seconds to open a connection; an unreachable (not refusing) endpoint costs this per try",
    )
    max_retries: int = Field(
        6, ge=0,
        description="retries after the first try, per call (429s, 5xx, timeouts, connection errors)",
    )
    retry_budget_s: float = Field(
        60.0, gt=0,
        description="seconds from a call's start after which it retries no more (a try in flight still runs to its timeout)",
    )
    backoff_s: float = Field(0.5, gt=0, description="first backoff; doubled per retry, with jitter")
    max_backoff_s: float = Field(20.0, gt=0, description="longest wait between two tries of one call (before jitter), also the cap on a provider's Retry-After")
    max_concurrency: int = Field(1024, ge=1, description="in-flight requests per API key in this process")
    max_connections: int | None = Field(None, ge=1, description="open sockets; default keys x max_concurrency")
    max_response_bytes: int = Field(
        2 * 1024 * 1024, ge=1024,
        description="largest answer read from the endpoint, in bytes (2 MiB); a longer one fails the try like a 502 and is retried",
    )
    max_tokens: int = Field(
        1024, ge=1,
        description="completion cap sent with provider=anthropic, which requires one (OpenAI-style requests send none unless the agent asks)",
    )
    anthropic_version: str = Field("2023-06-01", description="anthropic-version header sent with provider=anthropic")
    price_file: Path | None = Field(
        None,
        description='JSON file {"model": [prompt, completion], ...} of USD per million tokens, over the built-in prices',
    )
    prices: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description='JSON {"model": [prompt, completion], ...} of USD per million tokens, over the price file and the built-in prices',
    )

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("api_keys")
    @classmethod
    def _keys_fit_a_header(cls, keys: list[SecretStr]) -> list[SecretStr]:
        """A key with a control character (keys one per line, not comma-separated) made every call raise
        ValueError in aiohttp's header check: refused at start, naming the key by its label only."""
        for i, key in enumerate(keys, start=1):
            if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key.get_secret_value()):
                raise ValueError(f"key#{i} holds a control character (a line break?); separate keys with commas")
        return keys

    @field_validator("base_url", mode="before")
    @classmethod
    def _blank_is_offline(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("base_url")
    @classmethod
    def _http_url_with_a_host(cls, value: str | None) -> str | None:
        """``localhost:8100/v1`` (no scheme) failed every call instead, each retried for its whole budget as a
        transport error "at None:None". The message never repeats the URL: it may hold credentials."""
        if value is None:
            return None
        import yarl  # here: the offline model needs no URL

        try:
            url = yarl.URL(value.strip())
            usable = url.scheme in ("http", "https") and bool(url.host) and url.port is not None
        except ValueError:  # e.g. a port out of range
            usable = False
        if not usable:
            raise ValueError("must be an http:// or https:// URL with a host, e.g. https://api.deepseek.com/v1")
        return value

    @model_validator(mode="after")
    def _prices_load(self) -> LLMSettings:
        """A bad price file or price stops the worker at start, not every LLM job later."""
        try:
            PriceTable.load(self.price_file, self.prices)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def offline(self) -> bool:
        return self.base_url is None
