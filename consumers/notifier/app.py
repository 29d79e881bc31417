"""The notifier process: the ``notifier`` group on every served partition's results and due streams, webhooks out; drains on SIGTERM."""

from __future__ import annotations

import logging
import os
import secrets
import socket

from consumers.lifecycle import serve_until_stopped, settle_heap, stop_on_signals
from consumers.metrics_server import serve_metrics
from consumers.notifier.delivery import Deliverer
from consumers.notifier.dns import Resolver
from consumers.notifier.handler import NotifierHandler
from consumers.notifier.settings import NotifierSettings
from consumers.notifier.signing import Signer
from consumers.notifier.ssrf import SsrfGuard
from consumers.notifier.store import Store
from streams.gauges import register_stream_gauges
from streams.connection import connect_when_reachable
from streams.groups import hold_partition_groups
from streams.layout import hold_layout
from streams.hold import REFILL_FRACTION
from streams.keys import NOTIFIER_GROUP, Keys, serving_partitions
from streams.runtime import GroupRuntime

log = logging.getLogger("streamcrew.notifier")

# A pool full of work (an endpoint's backlog waiting its turn) is refilled once a tenth of it is free, or after
# REFILL_WAIT_S; settled entries are held for half that (committer.py), so one read and one commit serve
# several deliveries instead of one each. An idle pool reads, and commits, at once.
REFILL_WAIT_S = 0.1


def consumer_name() -> str:
    return f"notifier-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


def build_deliverer(settings: NotifierSettings) -> Deliverer:
    resolver = Resolver(timeout_s=min(settings.dns_timeout_s, settings.timeout_s))
    guard = SsrfGuard(allow_private=settings.allow_private, allow_list=settings.allow_list, resolver=resolver)
    return Deliverer(
        signer=Signer(settings.webhook_secrets, tenants=settings.tenant_secrets, urls=settings.subscription_secrets), guard=guard, concurrency=settings.concurrency,
        per_endpoint=settings.per_endpoint_concurrency, connect_timeout_s=settings.connect_timeout_s,
        timeout_s=settings.timeout_s, retry_after_cap_s=settings.backoff_max_s,
    )


def notifier_streams(stores: list[Store]) -> list[str]:
    """What the group reads, highest first: every partition's due retries, then every partition's results
    (two priority levels of one stream per partition, taken in turn within each)."""
    return [store.due for store in stores] + [store.keys.results for store in stores]


async def run_notifier(settings: NotifierSettings) -> int:
    """Deliver until SIGTERM/SIGINT, then drain; a second signal exits at once. Returns the exit code."""
    keys = Keys(settings.prefix)
    redis = await connect_when_reachable(settings.effective_redis_url, "notifier start")
    await hold_layout("notifier start", redis, keys, settings.partitions)  # another N: refused
    partitions = serving_partitions(keys, settings, settings.chosen_partitions)
    await hold_partition_groups("notifier start", redis, partitions)  # e.g. OOM: wait, not crash; a hung master: not it
    stores = [Store(redis, partition) for partition in partitions]
    name = consumer_name()
    runtime = GroupRuntime(redis, streams=notifier_streams(stores), level_size=len(stores), group=NOTIFIER_GROUP, consumer=name,
                           concurrency=settings.concurrency, lease_s=settings.lease_s, forget_idle_s=settings.consumer_idle_s,
                           refill=settings.concurrency // REFILL_FRACTION, refill_wait_s=REFILL_WAIT_S)
    deliverer = build_deliverer(settings)
    handler = NotifierHandler(stores, settings, runtime, deliverer)
    if not deliverer.signer.signs:
        log.warning("STREAMCREW_WEBHOOK_SECRET is not set: job webhooks without a tenant secret, and subscriptions "
                    "without their own, go out unsigned")
    if settings.metrics_port:
        register_stream_gauges(settings.effective_redis_url, keys, partitions=settings.partitions)
        serve_metrics(settings.metrics_port, settings.metrics_host)

    stop = stop_on_signals(f"notifier {name}", settings.grace_s)
    settle_heap()

    log.info("notifier %s ready: concurrency=%d per_endpoint=%d max_attempts=%d backoff=%ss lease=%ss "
             "allow_private=%s subscriptions=%d prefix=%s%s", name, settings.concurrency, settings.per_endpoint_concurrency,
             settings.max_attempts, settings.backoff_s, settings.lease_s, settings.allow_private,
             len(settings.subscriptions), settings.prefix,
             f" partitions={settings.serve_partitions or 'all'} of {settings.partitions}" if settings.partitions > 1 else "")
    finished, handed_back = await serve_until_stopped(runtime, handler.committer, stop, settings.grace_s)
    await handler.promotion_lease.let_go()
    handler.summary()
    log.info("notifier %s stopped: %d entries finished, %d handed back", name, finished, handed_back)
    await deliverer.aclose()
    await redis.aclose()
    return 0
