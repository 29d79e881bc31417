"""LLM settings, read once at the edge (``STREAMCREW_LLM_*``) and passed down."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class LLMSettings(BaseSettings):
    """How LLM agents reach a model. ``base_url=None`` selects the built-in offline model."""

    model_config = SettingsConfigDict(env_prefix="STREAMCREW_LLM_", extra="ignore")

    base_url: str | None = None
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    model: str = "deepseek-v3.2"
    provider: Literal["openai", "anthropic"] = "openai"
    timeout_s: float = Field(60.0, gt=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    max_retries: int = Field(6, ge=0, description="retries after the first attempt, per call")
    retry_budget_s: float = Field(60.0, gt=0, description="wall-clock cap on one call, waits included")
    backoff_s: float = Field(0.5, gt=0, description="first backoff; doubled per retry, with jitter")
    max_backoff_s: float = Field(20.0, gt=0, description="longest backoff, also the cap on a provider's Retry-After")
    max_concurrency: int = Field(1024, ge=1, description="in-flight requests per API key in this process")
    max_connections: int | None = Field(None, ge=1, description="open sockets; default keys x max_concurrency")
    max_tokens: int = Field(1024, ge=1, description="completion cap sent to the provider (Anthropic requires one)")
    anthropic_version: str = "2023-06-01"
    price_file: Path | None = None
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict, description='{"model": [prompt, completion]} USD per million tokens')

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("base_url", mode="before")
    @classmethod
    def _blank_is_offline(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @property
    def offline(self) -> bool:
        return self.base_url is None
