"""Micro-bench: CrewAI crew kickoffs per second in one process against mock-llm.

No Redis, no worker: ``run_agent`` on the ``order`` crew (two LLM calls and
one tool call per kickoff), ``--concurrency`` at a time, mock-llm in a
subprocess with ``--latency``. Usage:
    python -m bench.bench_crews [--jobs 400] [--concurrency 200] [--latency 0.2] [--agent order]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from agents.builtin import builtin_registry
from agents.crews import configure_executor
from agents.llm import LLMSettings, aclose, configure
from agents.registry import AgentContext
from agents.runner import run_agent
from consumers.mock_llm import MockOptions, running_mock_llm

INPUTS = {
    "order": {"order_id": "ORD-12345", "question": "Where is my package?"},
    "returns": {"order_id": "ORD-12346", "reason": "too small"},
    "product": {"question": "Is the hiking backpack in stock?"},
    "support": {"query": "Where is my parcel for order ORD-12345?", "customer_id": "CUS-001"},
    "ask": {"prompt": "Say hello"},
}


async def main(jobs: int, concurrency: int, latency_s: float, agent: str) -> None:
    registry = builtin_registry()
    spec = registry.get(agent)
    async with running_mock_llm(MockOptions(latency_s=latency_s), subprocess_=True) as mock:
        configure(LLMSettings(base_url=mock.openai_base_url, api_keys=["bench-key-1", "bench-key-2"], max_concurrency=concurrency))  # type: ignore[list-item]
        configure_executor(concurrency)
        gate = asyncio.Semaphore(concurrency)
        usage_total = 0

        async def one(i: int) -> None:
            nonlocal usage_total
            async with gate:
                _, usage = await run_agent(spec, INPUTS[agent], AgentContext(f"bench-{i}", agent, 1, 3))
                usage_total += (usage or {}).get("prompt_tokens", 0)

        await one(-1)  # warm-up: first kickoff builds CrewAI's caches
        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(i) for i in range(jobs)))
        elapsed = time.perf_counter() - started
        print(f"{agent}: {jobs} kickoffs, concurrency {concurrency}, mock latency {latency_s}s: "
              f"{elapsed:.2f}s, {jobs / elapsed:.1f}/s, cpu {time.process_time() - cpu:.2f}s")
        await aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--agent", default="order", choices=sorted(INPUTS))
    a = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main(a.jobs, a.concurrency, a.latency, a.agent))
