"""Settings of the Redis Streams layer, read once at the edge (``STREAMCREW_*``)."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class StreamSettings(BaseSettings):
    """What every streamcrew process needs to talk to its streams."""

    # An error never quotes the value given: API keys, webhook secrets and URL passwords are given here.
    model_config = SettingsConfigDict(env_prefix="STREAMCREW_", extra="ignore", hide_input_in_errors=True)

    redis_url: str | None = Field(
        default=None,
        description=("Redis to use (rediss:// for TLS; a Redis Cluster's nodes may be listed: redis://h1:7000,h2:7000/0); "
                     "unset means the embedded Redis where a command allows it, else redis://localhost:6379/0"),
    )
    prefix: str = Field(default="streamcrew", min_length=1, description="key prefix")
    lease_s: float = Field(default=60.0, gt=0, description="seconds a claimed job may go without a heartbeat before it is reclaimed")
    max_request_bytes: int = Field(default=1_048_576, gt=0, description="largest encoded request accepted")
    max_result_bytes: int = Field(
        default=1_048_576, gt=0,
        description="largest encoded result kept: a larger one fails its job; a workflow's result leaves out step results beyond it",
    )
    results_maxlen: int = Field(
        default=1_000_000, gt=0,
        description="result events kept (per partition) once every consumer group has acknowledged them; events a group still needs are kept beyond it",
    )
    results_hard_maxlen: int = Field(
        default=5_000_000, gt=0,
        description="hard cap of the results stream (per partition): past it even events a group has not acknowledged are cut, counted in streamcrew_results_dropped_total",
    )
    job_ttl_s: int = Field(default=7 * 24 * 3600, gt=0, description="seconds a job record lives after the job ends")
    retry_backoff_s: float = Field(default=1.0, ge=0, description="first retry delay of a failed job, doubled per attempt, with jitter")
    retry_backoff_max_s: float = Field(default=300.0, ge=0, description="longest retry delay")
    consumer_idle_s: float = Field(default=3600.0, gt=0, description="consumers idle this long with nothing pending are removed from their group")
    partitions: int = Field(default=1, ge=1, le=16384, description="partitions of every stream and key, one hash slot each (contract §10); 1 keeps the unpartitioned keys")
    replica_acks: int = Field(default=0, ge=0, le=16, description="replicas that must acknowledge each settle batch (WAIT) before its jobs count as done; 0 = do not wait")
    default_max_attempts: int = Field(default=3, ge=1, description="max_attempts of a request that does not set it")

    @model_validator(mode="after")
    def _hard_cap_above_keep(self) -> StreamSettings:
        if self.results_hard_maxlen < self.results_maxlen:
            raise ValueError(f"results_hard_maxlen ({self.results_hard_maxlen}) must be >= results_maxlen ({self.results_maxlen})")
        return self

    @property
    def effective_redis_url(self) -> str:
        return self.redis_url or "redis://localhost:6379/0"
