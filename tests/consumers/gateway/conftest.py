from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.consumers.gateway.support import GatewayFactory


@pytest.fixture
def gateways(redis_url: str, prefix: str, tmp_path: Path) -> Iterator[GatewayFactory]:
    factory = GatewayFactory(redis_url, prefix, tmp_path)
    yield factory
    factory.close()
