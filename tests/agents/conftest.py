"""Fixtures for agents/: a real mock-llm on loopback, LLM settings pointing at it, a fresh ledger.

CrewAI 1.15 emits an ImportWarning while importing ``crewai.rag`` (and a few
DeprecationWarnings, already ignored project-wide); pyproject turns warnings
into errors, so the ImportWarning from CrewAI's own import is ignored here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from agents.llm import configure
from agents.llm import runtime as llm_runtime
from agents.usage import UsageLedger, current_ledger
from consumers.mock_llm import MockOptions, RunningMock, running_mock_llm


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", "ignore:Cannot set an attribute on 'crewai:ImportWarning")


@pytest.fixture
def mock_options() -> MockOptions:
    """Override in a test module (or parametrize) to inject faults."""
    return MockOptions()


@pytest.fixture
async def mock_llm(mock_options: MockOptions) -> AsyncIterator[RunningMock]:
    async with running_mock_llm(mock_options) as running:
        yield running


@pytest.fixture
def ledger() -> Iterator[UsageLedger]:
    """A job's usage ledger, as the worker's runner opens one."""
    ledger = UsageLedger()
    token = current_ledger.set(ledger)
    yield ledger
    current_ledger.reset(token)


@pytest.fixture(autouse=True)
async def _fresh_llm_runtime() -> AsyncIterator[None]:
    """Each test starts from the environment's settings (offline by default) and closes what it opened."""
    configure(None)
    yield
    await llm_runtime.aclose()
    configure(None)
