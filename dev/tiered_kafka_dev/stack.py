"""The whole local stack on one machine: ``python -m tiered_kafka_dev.stack`` (``make run``).

What it does today:
1. starts Redis, ZooKeeper and S3 (SeaweedFS) on free 127.0.0.1 ports;
2. starts the development Kafka broker, registered in that ZooKeeper like a ZK-mode broker;
3. creates the topic ``demo`` with small segments, produces sample records until segments
   roll, and reads them back with a confluent-kafka consumer group;
4. prints how to reach everything (also as ``export`` lines) and runs until Ctrl-C.

The agent, the gateway and the SDK's consumption modes join this flow as they are built.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tiered_kafka_dev.broker.config import BrokerConfig
from tiered_kafka_dev.broker.server import Broker, BrokerThread
from tiered_kafka_dev.services import RedisServer, S3Server, ServiceError, ZooKeeperServer
from tiered_kafka_dev.services.__main__ import describe

DEMO_TOPIC = "demo"


def demo(bootstrap: str, log_dir: Path, records: int) -> None:
    """Produce ``records`` sample records into small segments and read them back."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(DEMO_TOPIC, 2, 1, config={"segment.bytes": "262144"})]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    for i in range(records):
        value = f"record {i} ".encode() + os.urandom(300)  # incompressible enough to fill segments
        producer.produce(DEMO_TOPIC, key=f"key-{i}".encode(), value=value, partition=i % 2)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(30)
    segments = {p: sorted(x.name for x in (log_dir / f"{DEMO_TOPIC}-{p}").glob("*.log")) for p in range(2)}
    print(f"produced {records} records to '{DEMO_TOPIC}'; segments on disk: " + ", ".join(f"partition {p}: {len(s)}" for p, s in segments.items()))

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-reader", "auto.offset.reset": "earliest"})
    consumer.subscribe([DEMO_TOPIC])
    seen: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while sum(seen.values()) < records and time.monotonic() < deadline:
        for message in consumer.consume(5000, 0.5):
            if message.error() is None:
                seen[message.partition()] = seen.get(message.partition(), 0) + 1
    consumer.close()
    print(f"read back {sum(seen.values())} records from Kafka (by partition: {dict(sorted(seen.items()))})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tiered_kafka_dev.stack", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000, help="sample records to produce")
    parser.add_argument("--exit-after-demo", action="store_true", help="stop everything after the demo (smoke tests)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with contextlib.ExitStack() as stack:
            services = []
            for launcher in (RedisServer, ZooKeeperServer, S3Server):
                print(f"starting {launcher.__name__} ...", file=sys.stderr, flush=True)
                services.append(stack.enter_context(launcher()))
            zookeeper = next(s for s in services if isinstance(s, ZooKeeperServer))
            log_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tiered-kafka-logs-")))
            broker: BrokerThread = Broker(BrokerConfig(log_dir=log_dir, zookeeper_connect=zookeeper.hosts)).run_in_thread()
            stack.callback(broker.stop)
            bootstrap = broker.broker.bootstrap_servers

            exports: dict[str, str] = {"TIERED_KAFKA_BOOTSTRAP_SERVERS": bootstrap}
            for service in services:
                lines, env = describe(service)
                print("\n".join(lines))
                exports.update(env)
            print(f"Kafka      {bootstrap}  (development broker, log.dirs {log_dir}, registered in ZooKeeper)")
            print()
            demo(bootstrap, log_dir, args.records)
            print()
            for key, value in exports.items():
                print(f"export {key}={shlex.quote(value)}")
            if args.exit_after_demo:
                return 0
            print("\nRunning; press Ctrl-C to stop.", file=sys.stderr, flush=True)
            stop.wait()
            print("stopping ...", file=sys.stderr, flush=True)
        return 0
    except ServiceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
