"""``tiered-kafka-gateway``: run the gateway with uvicorn.

    tiered-kafka-gateway --config gateway.json --host 127.0.0.1 --port 8080 --workers 2

Settings: the JSON file (or $TIERED_KAFKA_GATEWAY_CONFIG) and TIERED_KAFKA_GATEWAY_* variables.

Fail closed: on an address beyond loopback (``--host 0.0.0.0``, the Docker image's), the gateway
refuses to start without authentication (``auth.enabled`` with ``auth.tokens``) unless
``auth.allow_anonymous`` is true (``config.check_exposure``); it exits with status 2 and says why.

With ``--workers`` N > 1, uvicorn runs N worker processes; Prometheus metrics then use
prometheus_client's multiprocess mode (``metrics`` module docstring): unless
$PROMETHEUS_MULTIPROC_DIR is already set (then that directory is used as is, and the operator
empties it between runs), a fresh temporary directory is created for the server's lifetime,
given to the workers through that variable, and removed when the server stops.
"""

from __future__ import annotations

import argparse
import logging
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from tiered_kafka.errors import ConfigError
from tiered_kafka_gateway.config import ENV_PREFIX, check_exposure, load_settings
from tiered_kafka_gateway.metrics import MULTIPROC_ENV
from tiered_kafka_gateway.kafka_listener.runner import check_listeners


@contextlib.contextmanager
def metrics_directory(workers: int) -> Iterator[str | None]:
    """$PROMETHEUS_MULTIPROC_DIR for ``workers`` processes (module docstring); None for one."""
    given = os.environ.get(MULTIPROC_ENV)
    if given or workers <= 1:
        yield given or None
        return
    path = tempfile.mkdtemp(prefix="tiered-kafka-gateway-metrics-")
    os.environ[MULTIPROC_ENV] = path  # inherited by the workers uvicorn spawns
    try:
        yield path
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tiered-kafka-gateway", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (metrics: module docstring)")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)])
    if args.config:
        os.environ[f"{ENV_PREFIX}CONFIG"] = str(args.config)
    try:
        settings = load_settings()
        check_exposure(settings, args.host)
        check_listeners(settings)  # each cluster's Kafka listener (started by the app's lifespan: kafka_listener.runner)
    except ConfigError as err:
        print(f"tiered-kafka-gateway: {err}", file=sys.stderr)
        return 2
    logging.getLogger(__name__).info("serving clusters %s", sorted(settings.clusters))
    if args.workers < 1:
        print(f"tiered-kafka-gateway: --workers must be at least 1, got {args.workers}", file=sys.stderr)
        return 2
    with metrics_directory(args.workers):
        uvicorn.run("tiered_kafka_gateway.asgi:app", host=args.host, port=args.port, workers=args.workers, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
