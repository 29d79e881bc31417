"""The worker process: one envelope in, one agent call, one result out; drains on SIGTERM."""

from __future__ import annotations

import importlib
import logging
import os
import secrets
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError

from agents import AgentContext, AgentRegistry, default_registry, run_agent
from agents import llm as agents_llm
from agents.registry import UnknownAgent
from agents.builtin import CREW_AGENTS, CREWAI_EXTRA, DESIGN_ALIASES, builtin_registry, missing_crewai
from agents.llm import LLMSettings
from consumers.lifecycle import serve_until_stopped, settle_heap, stop_on_signals
from consumers.metrics_server import serve_metrics
from consumers.settings import WorkerSettings
from streams.connection import connect_when_reachable
from streams.envelope import JobRequest
from streams.gauges import register_stream_gauges
from streams.groups import hold_partition_groups
from streams.jobs import JobProcessor
from streams.hold import REFILL_FRACTION
from streams.keys import WORKERS_GROUP, Keys, lanes_in_priority, serving_partitions
from streams.layout import hold_layout, warn_of_unread_lanes
from streams.urls import loggable_url
from streams.workflow import WORKFLOW_AGENT
from streams.runtime import GroupRuntime

log = logging.getLogger("streamcrew.worker")


class AgentExecutor:
    """Runs registered agents for the job runtime (the :class:`streams.jobs.JobExecutor`)."""

    def __init__(self, registry: AgentRegistry, settings: WorkerSettings, pool: ThreadPoolExecutor) -> None:
        self.registry = registry
        self.settings = settings
        self.pool = pool

    def unknown(self, agent: str) -> str:
        # A worker cannot pass a job on: every worker of the prefix reads the same lanes (docs/agents.md).
        return (f"unknown agent {agent!r}; this worker serves: {', '.join(self.registry.names())} "
                "(all workers of one prefix must serve the same agents)")

    def check(self, request: JobRequest) -> str | None:
        return None if request.agent in self.registry else self.unknown(request.agent)

    def check_step(self, agent: str, data: dict[str, Any]) -> str | None:
        if agent not in self.registry:
            return self.unknown(agent)
        spec = self.registry.get(agent)
        if spec.unavailable:  # its job would end rejected: the workflow would run its other steps first (contract §9)
            return f"agent {agent!r} {spec.unavailable}"
        if spec.input_model is not None:
            try:
                spec.input_model.model_validate(data)
            except ValidationError as exc:
                details = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'data'}: {e['msg']}" for e in exc.errors())
                return f"invalid input for agent {agent!r}: {details}"
        return None

    def max_attempts(self, request: JobRequest) -> int:
        if request.max_attempts is not None:
            return request.max_attempts
        spec = self.registry.get(request.agent)
        return spec.max_attempts or self.settings.default_max_attempts

    async def execute(self, request: JobRequest, job_id: str, attempt: int, max_attempts: int) -> tuple[Any, dict[str, Any] | None]:
        spec = self.registry.get(request.agent)
        ctx = AgentContext(job_id=job_id, agent=request.agent, attempt=attempt, max_attempts=max_attempts,
                           tenant=request.tenant, traceparent=request.traceparent,
                           parent=request.parent, step=request.step, inputs=request.inputs or {})
        return await run_agent(spec, request.data, ctx, timeout_s=request.timeout_s or spec.timeout_s, executor=self.pool)


def load_registry(settings: WorkerSettings) -> AgentRegistry:
    """Built-in agents, plus those the ``--app`` modules register, limited to ``--agents``."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in settings.app:
        importlib.import_module(module)
    registry = builtin_registry(settings.agents)
    for name in default_registry.names():
        spec = default_registry.get(name)
        registry.add(spec.fn, name=name, input_model=spec.input_model, timeout_s=spec.timeout_s, max_attempts=spec.max_attempts)
    try:
        return registry.subset(settings.agents) if settings.agents else registry
    except UnknownAgent as exc:  # name every agent it could serve, the crews too (not loaded unless named)
        raise UnknownAgent(exc.name, {*registry.names(), *CREW_AGENTS, *DESIGN_ALIASES, WORKFLOW_AGENT}) from None


def consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


async def run_worker(settings: WorkerSettings, registry: AgentRegistry, llm: LLMSettings | None = None) -> int:
    """Serve until SIGTERM/SIGINT, then drain; a second signal exits at once."""
    agents_llm.configure(llm)
    keys = Keys(settings.prefix)
    redis = await connect_when_reachable(settings.effective_redis_url, "worker start")
    await hold_layout("worker start", redis, keys, settings.partitions)  # another N: refused
    await warn_of_unread_lanes(redis, keys, settings.partitions)
    partitions = serving_partitions(keys, settings, settings.chosen_partitions)
    pool = ThreadPoolExecutor(max_workers=min(settings.concurrency, 256), thread_name_prefix="agent")
    _configure_agents(settings)
    await hold_partition_groups("worker start", redis, partitions)  # e.g. OOM: wait, not crash; a hung master: not it
    name = consumer_name()
    runtime = GroupRuntime(redis, streams=lanes_in_priority(partitions), level_size=len(partitions), group=WORKERS_GROUP,
                           consumer=name, concurrency=settings.concurrency, lease_s=settings.lease_s, forget_idle_s=settings.consumer_idle_s,
                           refill=settings.concurrency // REFILL_FRACTION if settings.refill_wait_ms else 1,
                           refill_wait_s=settings.refill_wait_ms / 1000)
    processor = JobProcessor(redis, keys, settings, runtime, AgentExecutor(registry, settings, pool),
                             summary_every_s=settings.log_summary_s, partitions=partitions, caps=settings.tenant_caps)
    if settings.metrics_port:
        register_stream_gauges(settings.effective_redis_url, keys, partitions=settings.partitions)
        serve_metrics(settings.metrics_port, settings.metrics_host)

    stop = stop_on_signals(f"worker {name}", settings.grace_s)

    settle_heap()
    llm_settings = agents_llm.runtime.settings()
    if needs_crewai := missing_crewai(registry):
        log.warning("agents %s need CrewAI, which is not installed: %s (until then their jobs end rejected)",
                    ",".join(needs_crewai), CREWAI_EXTRA)
    log.info("worker %s ready: agents=%s concurrency=%d lease=%ss prefix=%s llm=%s%s%s", name, ",".join(registry.names()),
             settings.concurrency, settings.lease_s, settings.prefix,
             f"{llm_settings.model} at {loggable_url(llm_settings.base_url)}" if llm_settings.base_url else "offline model",
             f" partitions={settings.serve_partitions or 'all'} of {settings.partitions}" if settings.partitions > 1 else "",
             f" tenant_max_running={settings.tenant_max_running}" if settings.tenant_caps else "")
    finished, handed_back = await serve_until_stopped(runtime, processor.settler, stop, settings.grace_s)
    await processor.upkeep_lease.let_go()
    log.info("worker %s stopped: %d in-flight jobs finished, %d handed back", name, finished, handed_back)
    pool.shutdown(wait=False, cancel_futures=True)
    await agents_llm.aclose()
    await redis.aclose()
    return 0


def _configure_agents(settings: WorkerSettings) -> None:
    """Size shared agent resources (e.g. the crew executor) to this worker's concurrency."""
    crews = sys.modules.get("agents.crews")  # imported only when this worker serves a crew
    if crews is not None:
        crews.configure_executor(settings.concurrency)
