"""The Kafka bridge's tests need faust (the ``[kafka]`` extra, part of ``[test]``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

pytest.importorskip("faust", reason="the Kafka bridge needs faust-streaming: pip install 'streamcrew[kafka]'")

from consumers.kafka_bridge.settings import KafkaBridgeSettings  # noqa: E402


@pytest.fixture
def bridge_settings(redis_url: str, prefix: str) -> KafkaBridgeSettings:
    # The broker is never contacted by the agent tests: faust's test context feeds the agents directly.
    return KafkaBridgeSettings(redis_url=redis_url, prefix=prefix, kafka_broker="kafka://127.0.0.1:9", metrics_port=0)


@pytest.fixture
async def bridge(bridge_settings: KafkaBridgeSettings, redis: object) -> AsyncIterator[object]:
    from consumers.kafka_bridge.app import build_bridge
    from consumers.kafka_bridge.results_out import KAFKA_BRIDGE_GROUP
    from streams.groups import ensure_group
    from streams.keys import Keys

    await ensure_group(redis, Keys(bridge_settings.prefix).results, KAFKA_BRIDGE_GROUP)  # type: ignore[arg-type]
    built = build_bridge(bridge_settings, redis, consumer="test-bridge")  # type: ignore[arg-type]
    yield built
    import shutil

    shutil.rmtree(built.datadir, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.consumers.kafka.broker import SKIP_REASON
    from tests.consumers.kafka.broker import kafka_bootstrap as find

    with find(tmp_path_factory.mktemp("kafka")) as bootstrap:
        if bootstrap is None:
            pytest.skip(SKIP_REASON)
        yield bootstrap
