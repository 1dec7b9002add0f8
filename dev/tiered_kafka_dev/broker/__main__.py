"""Start the development broker: ``python -m tiered_kafka_dev.broker`` or ``tiered-kafka-dev-broker``.

    tiered-kafka-dev-broker --log-dir /tmp/kafka-logs                    # a free port, printed
    tiered-kafka-dev-broker --config server.properties --override log.retention.ms=60000
    tiered-kafka-dev-broker --log-dir DIR --port 9092 --zookeeper 127.0.0.1:2181

It runs until Ctrl-C or SIGTERM, then shuts down cleanly (checkpoints written, indexes trimmed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

from tiered_kafka.errors import ConfigError
from tiered_kafka_dev.broker.config import BrokerConfig, read_properties
from tiered_kafka_dev.broker.server import Broker


def parse_args(argv: list[str] | None) -> dict[str, str]:
    parser = argparse.ArgumentParser(prog="tiered-kafka-dev-broker", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, help="a Kafka server.properties file")
    parser.add_argument("--override", action="append", default=[], metavar="NAME=VALUE", help="a broker config (repeatable)")
    parser.add_argument("--log-dir", help="log.dirs")
    parser.add_argument("--port", type=int, help="the PLAINTEXT listener port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--zookeeper", help="zookeeper.connect, e.g. 127.0.0.1:2181")
    parser.add_argument("--node-id", type=int, help="node.id")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)], format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    properties = read_properties(args.config) if args.config else {}
    for item in args.override:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--override expects NAME=VALUE, got {item!r}")
        properties[name.strip()] = value.strip()
    if args.log_dir:
        properties["log.dirs"] = args.log_dir
    if args.port is not None:
        properties["listeners"] = f"PLAINTEXT://127.0.0.1:{args.port}"
    if args.zookeeper:
        properties["zookeeper.connect"] = args.zookeeper
    if args.node_id is not None:
        properties["node.id"] = str(args.node_id)
    return properties


async def serve(config: BrokerConfig) -> None:
    broker = Broker(config)
    await broker.start()
    print(f"development broker {broker.node_id} ready: bootstrap.servers={broker.bootstrap_servers} cluster.id={broker.cluster_id} log.dirs={config.log_dir}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await broker.stop()


def main(argv: list[str] | None = None) -> int:
    try:
        config = BrokerConfig.from_properties(parse_args(argv))
    except ConfigError as err:
        print(f"tiered-kafka-dev-broker: {err}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
