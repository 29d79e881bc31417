"""Settings of the long-running processes, built once by the CLI and passed down."""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from streams.config import StreamSettings
from streams.keys import parse_partitions
from streams.tenant_cap import TenantCaps, parse_tenant_caps

DEFAULT_WORKER_METRICS_PORT = 9101
DEFAULT_NOTIFIER_METRICS_PORT = 9102


class ServesMetrics(StreamSettings):
    """A process with its own ``/metrics`` server (prometheus-client's): the worker, the notifier, the Kafka bridge."""

    metrics_host: str = Field(default="0.0.0.0", min_length=1, description="address /metrics listens on; 127.0.0.1 keeps it on this host")


class ServesPartitions(ServesMetrics):
    """A process that reads some or all partitions (contract §10): the worker and the notifier."""

    serve_partitions: str = Field(default="", description="partitions this process reads, e.g. 0-3,5 (CLI --partitions); empty = all of STREAMCREW_PARTITIONS")

    @model_validator(mode="after")
    def _check_partitions(self) -> ServesPartitions:
        parse_partitions(self.serve_partitions, self.partitions)
        return self

    @property
    def chosen_partitions(self) -> tuple[int, ...]:
        return parse_partitions(self.serve_partitions, self.partitions)


class WorkerSettings(ServesPartitions):
    """``streamcrew worker``: every field is also a ``STREAMCREW_*`` variable."""

    concurrency: int = Field(default=100, ge=1, le=100_000, description="jobs run at once by one worker process")
    refill_wait_ms: int = Field(
        default=50, ge=0, le=10_000,
        description="while fewer than a tenth of the slots are free, wait up to this long for a tenth before claiming more, "
                    "and hold finished jobs' settles up to half of it: one read and one settle then serve several jobs "
                    "instead of one each (several times less Redis CPU per job when job times vary); 0 = claim as soon as "
                    "a slot frees")
    # NoDecode: a plain "a,b" from the environment reaches _split_commas (pydantic-settings would parse it as JSON)
    agents: Annotated[list[str] | None, NoDecode] = Field(default=None, description="agents this worker serves (default: all registered)")
    app: Annotated[list[str], NoDecode] = Field(default_factory=list, description="modules to import that register user agents")
    metrics_port: int = Field(default=DEFAULT_WORKER_METRICS_PORT, ge=0, le=65535, description="port of /metrics; 0 = off")
    grace_s: float = Field(default=30.0, ge=0, description="seconds a draining worker lets in-flight jobs finish before handing them back")
    log_level: str = Field(default="info", description="debug, info, warning or error")
    log_summary_s: float = Field(default=10.0, ge=0, description="seconds between INFO summary lines of jobs done (per-job lines are DEBUG); 0 = off")
    # NoDecode: "20" and '{"*": 20}' both reach _check_tenant_caps as given
    tenant_max_running: Annotated[str, NoDecode] = Field(
        default="",
        description='jobs of one tenant running at once, fleet-wide: N for every tenant, or JSON {"*": N, "acme": M} ("*" the default, '
                    "0 = no cap); over it a job waits parked, no attempt counted (docs/operations.md); unset = no cap")

    @field_validator("tenant_max_running", mode="before")
    @classmethod
    def _check_tenant_caps(cls, value: object) -> object:
        """Refused at start-up with the reason, not at the first job of a capped tenant."""
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, dict):
            value = json.dumps(value)
        if not isinstance(value, str):
            raise ValueError('an integer or a JSON object such as {"*": 20, "acme": 100}')
        parse_tenant_caps(value)
        return value

    @property
    def tenant_caps(self) -> TenantCaps | None:
        return parse_tenant_caps(self.tenant_max_running)

    @field_validator("agents", "app", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        """``a,b`` (as the docs write it), or a JSON list (``["a", "b"]``, what pydantic-settings alone read)."""
        if isinstance(value, str) and value.lstrip().startswith("["):
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError(f"not a JSON list of names: {value[:100]!r}") from None
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value
