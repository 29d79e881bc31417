"""Agents: turn a job's input into an output; know nothing of processes.

Note: the OpenAI Agents SDK also installs a top-level package named ``agents``;
streamcrew's layout keeps this name, so do not install both in one environment.
"""

from agents.registry import AgentContext, AgentRegistry, AgentSpec, UnknownAgent, agent, default_registry
from agents.runner import run_agent
from agents.usage import UsageLedger, current_ledger, record_usage
from streams.errors import Reject, RetryLater

__all__ = [
    "AgentContext", "AgentRegistry", "AgentSpec", "Reject", "RetryLater", "UnknownAgent",
    "UsageLedger", "agent", "current_ledger", "default_registry", "record_usage", "run_agent",
]
