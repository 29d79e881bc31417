"""Property-based requests from /openapi.json (positive and negative) find no server error, and every
answer conforms to the document (status code, content type, body schema).

Bounded: ``MAX_EXAMPLES`` per operation and mode, and a wall-clock budget per operation.
"""

from __future__ import annotations

import time

import pytest

from tests.consumers.gateway.support import GatewayFactory

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")
checks = pytest.importorskip("schemathesis.specs.openapi.checks")
failures_module = pytest.importorskip("schemathesis.core.failures")

CONFORMANCE = [checks.status_code_conformance, checks.content_type_conformance, checks.response_schema_conformance]

MAX_EXAMPLES = 30
BUDGET_S = 2.5
REQUEST_TIMEOUT_S = 5


async def test_openapi_fuzzing_finds_no_server_error_and_answers_conform(gateways: GatewayFactory) -> None:
    # Given a gateway with short event streams (no worker: the jobs it accepts stay queued)
    gateway = await gateways.start({"STREAMCREW_SSE_MAX_S": "0.3"})
    schema = schemathesis.openapi.from_url(f"{gateway.url}/openapi.json", timeout=REQUEST_TIMEOUT_S)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 17, [op.label for op in operations]

    failures: list[str] = []
    for operation in operations:
        strategy = operation.as_strategy(schemathesis.GenerationMode.POSITIVE) | operation.as_strategy(schemathesis.GenerationMode.NEGATIVE)
        deadline = time.monotonic() + BUDGET_S

        @hypothesis.settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
                             suppress_health_check=list(hypothesis.HealthCheck), phases=[hypothesis.Phase.generate])
        @hypothesis.given(case=strategy)
        def probe(case: schemathesis.Case) -> None:
            if time.monotonic() > deadline:  # noqa: B023 - probe runs within this iteration
                return
            response = case.call(base_url=gateway.url, timeout=REQUEST_TIMEOUT_S)
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}")
            elif response.status_code >= 400:
                assert response.json()["error"]["code"], (case.method, case.formatted_path, response.text)
            try:
                case.validate_response(response, checks=CONFORMANCE)
            except (failures_module.Failure, failures_module.FailureGroup) as exc:
                failures.append(f"{case.method} {case.formatted_path} -> {response.status_code} does not conform: {str(exc)[:300]}")

        probe()

    # Then no request made the gateway fail, and every answer is what the document says
    assert not failures, "\n".join(sorted(set(failures))[:20]) + "\n" + gateway.child.log_text()[-3000:]
