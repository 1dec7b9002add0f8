"""Starting and stopping the listeners of an app's clusters, on the app's event loop (its lifespan).

``start(app)`` builds, for each cluster with a ``kafka_listener`` section, a listener over the app's
own ``ClusterSource`` (the same caches as the HTTP side) and starts it; ``stop`` closes them. With
``tiered-kafka-gateway --workers N`` every worker runs each listener on the same port
(SO_REUSEPORT: the kernel spreads connections over the workers), as uvicorn spreads HTTP ones.

Fail closed: a listener on an address beyond loopback needs authentication (or
``auth.allow_anonymous``), by the HTTP side's own rule (``config.check_exposure``).
"""

from __future__ import annotations

import ssl
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tiered_kafka.modes import reads_kafka
from tiered_kafka_gateway.config import GatewaySettings, check_exposure
from tiered_kafka_gateway.kafka_listener.context import ListenerContext
from tiered_kafka_gateway.kafka_listener.metrics import ListenerMetrics
from tiered_kafka_gateway.kafka_listener.sasl import token_check
from tiered_kafka_gateway.kafka_listener.server import Listener
from tiered_kafka_gateway.kafka_listener.upstream import Upstream, check_supported
from tiered_kafka_gateway.sources import ClusterSource

THREADS = 16


def check_listeners(settings: GatewaySettings) -> None:
    """ConfigError for a listener that may not start (exposure, Kafka security): before serving anything."""
    for cluster in settings.clusters.values():
        if cluster.kafka_listener is not None:
            check_exposure(settings, cluster.kafka_listener.host)
            if cluster.bootstrap_servers:
                check_supported(cluster.kafka_client_config())


class Listeners:
    def __init__(self) -> None:
        self.running: dict[str, Listener] = {}
        self.pool: ThreadPoolExecutor | None = None

    async def start(self, settings: GatewaySettings, readers: dict[str, ClusterSource], metrics: ListenerMetrics) -> Listeners:
        check_listeners(settings)
        check = token_check(settings)
        for name, cluster in settings.clusters.items():
            options = cluster.kafka_listener
            if options is None:
                continue
            self.pool = self.pool or ThreadPoolExecutor(THREADS, thread_name_prefix="kafka-listener")
            upstream = Upstream(cluster.bootstrap_servers, settings.kafka.timeout_s) if cluster.bootstrap_servers and reads_kafka(options.mode) else None
            context = None
            if options.tls_certfile:
                context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                context.load_cert_chain(options.tls_certfile, options.tls_keyfile)
            ctx = ListenerContext(name, readers[name], options, upstream, metrics, check, self.pool)
            listener = Listener(ctx, context)
            await listener.start()
            self.running[name] = listener
        return self

    async def stop(self) -> None:
        for listener in self.running.values():
            await listener.stop()
        self.running.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


async def start(app: Any) -> Listeners:
    return await Listeners().start(app.state.settings, app.state.readers, app.state.metrics.listener)
