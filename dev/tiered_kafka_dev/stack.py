"""The whole local stack on one machine: ``python -m tiered_kafka_dev.stack`` (``make run``).

What it does today:
1. starts Redis and S3 (SeaweedFS) on free 127.0.0.1 ports, and creates a bucket;
2. starts Apache Kafka (4.x, one KRaft node: broker and controller; from Maven Central through
   ``dev/install.sh``) on a free port with a fresh log.dir;
3. starts the agent in-process beside it, following leadership through Kafka's Admin API (the
   agent's ``kraft`` mode) as in a real KRaft deployment, uploading to that bucket and registering in
   that Redis;
4. creates the topic ``demo`` with small segments (256 KiB: Kafka's test-only
   ``internal.segment.bytes``, since 4.x refuses ``segment.bytes`` below 1 MiB), produces sample records until segments
   roll, and reads them back with a confluent-kafka consumer group;
5. waits until the agent has uploaded and registered every rotated segment, and shows what
   landed in S3 and Redis;
6. starts the gateway (uvicorn, in-process) and reads through it as a client in any language
   would: a read plan whose first range is fetched through its presigned URL and decoded, and
   JSON records in REMOTE_PREFERRED mode, from remote storage and then from Kafka; prints the URL
   of its coverage page (``/ui/``: remote segments, gaps and Kafka's range of every partition);
7. moves the broker's log start of partition 0 forward (DeleteRecords, as retention would) and
   reads the whole topic with the SDK's ``TieredConsumer`` in each of the four modes, printing per
   partition how many records came from remote storage and how many from Kafka;
8. reads the topic with Spark through ``format("tiered-kafka")`` and backfills it to Parquet,
   checking the row counts against the registry (``tiered_kafka_dev.spark_demo``; ``--no-spark``
   skips it);
9. prints how to reach everything (also as ``export`` lines) and runs until Ctrl-C.

Stopping (Ctrl-C or SIGTERM; also after an error or ``--exit-after-demo``) closes things in one
order, whatever order they were started in (``shutdown_stages``): the readers (the demo's Redis
client, Spark's temporary directory), the gateway, the agent, the broker (then its log.dir), the
services. A signal while the demo runs interrupts it (KeyboardInterrupt, exit code 130) and stops
the same way; once the stack is up and waiting, it exits 0. A second signal while stopping is
ignored, so the shutdown is never cut short half-way. The Spark stage restores the SIGINT handler
that PySpark replaces (``spark_demo.sigint_handler_kept``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tiered_kafka.errors import TieredKafkaError
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.registry import Registry, SegmentEntry
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.config import AgentSettings, load_settings
from tiered_kafka_dev.services import KafkaServer, RedisServer, S3Server, ServiceError, topic_configs
from tiered_kafka_dev.services.__main__ import describe
from tiered_kafka_dev.services._process import free_ports

DEMO_TOPIC = "demo"
DEMO_PARTITIONS = 2
DEMO_BUCKET = "tiered-kafka-demo"
CLUSTER = "local"
S3_PREFIX = "tiered"
ENTROPY_BITS = 3
UPLOAD_WAIT_S = 60.0


SHUTDOWN_ORDER = ("readers", "gateway", "agent", "broker", "services")


@contextlib.contextmanager
def shutdown_stages(stopping: Callable[[], object] | None = None) -> Iterator[dict[str, contextlib.ExitStack]]:
    """One ExitStack per stage of ``SHUTDOWN_ORDER``; on exit ``stopping()`` runs, then the stages
    close in that order (within a stage, last registered first), whatever order things were
    registered in."""
    with contextlib.ExitStack() as outer:
        stages: dict[str, contextlib.ExitStack] = {}
        for name in reversed(SHUTDOWN_ORDER):  # the last entered is the first closed
            stages[name] = outer.enter_context(contextlib.ExitStack())
        if stopping is not None:
            outer.callback(stopping)
        yield stages


class DemoError(Exception):
    """The demo did not do what it should (printed as an error; the stack then stops)."""


def demo(bootstrap: str, log_dir: Path, records: int) -> None:
    """Produce ``records`` sample records into small segments and read them back."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(DEMO_TOPIC, DEMO_PARTITIONS, 1, config=topic_configs({"segment.bytes": "262144"}))]).values():
        future.result(timeout=30)
    # batch.size below segment.bytes: Kafka refuses a batch larger than a segment (RECORD_LIST_TOO_LARGE)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4", "batch.size": 65536})
    failures: list[str] = []
    for i in range(records):
        value = f"record {i} ".encode() + os.urandom(300)  # incompressible enough to fill segments
        producer.produce(
            DEMO_TOPIC, key=f"key-{i}".encode(), value=value, partition=i % DEMO_PARTITIONS,
            on_delivery=lambda err, _msg: err is not None and failures.append(str(err)),
        )
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(30) or failures:
        raise DemoError(f"producing to '{DEMO_TOPIC}' failed: {len(failures)} records not delivered ({failures[:1]})")
    segments = {p: segment_bases(log_dir, p) for p in range(DEMO_PARTITIONS)}
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


def segment_bases(log_dir: Path, partition: int) -> list[int]:
    """Base offsets of the partition's segments on disk, in order (the last is the active one)."""
    return sorted(int(path.name[:20]) for path in (log_dir / f"{DEMO_TOPIC}-{partition}").glob("*.log"))


def agent_settings(log_dir: Path, broker_id: int, redis_server: RedisServer, bootstrap: str, s3: S3Server, bucket: str, metrics_port: int) -> AgentSettings:
    """The agent's settings for this stack: leadership from Kafka's Admin API, as in a KRaft deployment."""
    return load_settings(
        None,
        cluster=CLUSTER,
        broker_id=broker_id,
        log_dirs=[log_dir],
        s3={
            "bucket": bucket,
            "endpoint_url": s3.endpoint_url,
            "access_key_id": s3.access_key,
            "secret_access_key": s3.secret_key,
            "region": s3.region,
            "entropy_bits": ENTROPY_BITS,
            "prefix": S3_PREFIX,
        },
        redis={"url": redis_server.url},
        leadership={"mode": "kraft", "bootstrap_servers": bootstrap, "poll_interval_s": 2.0},
        upload={"rescan_interval_s": 1.0},
        metrics={"port": metrics_port},
    )


def wait_for_uploads(registry: Registry, log_dir: Path, stop: threading.Event, timeout_s: float = UPLOAD_WAIT_S) -> dict[int, list[SegmentEntry]]:
    """Wait until every rotated segment of every demo partition is registered; return the entries.

    Rotated segments are every ``.log`` but the one with the largest base offset (the active one).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        entries = {p: registry.segments(DEMO_TOPIC, p) for p in range(DEMO_PARTITIONS)}
        missing = {}
        for p in range(DEMO_PARTITIONS):
            rotated = segment_bases(log_dir, p)[:-1]
            registered = [e.base_offset for e in entries[p]]
            if not rotated or registered != rotated:
                missing[p] = (rotated, registered)
        if not missing:
            return entries
        if stop.is_set():
            raise DemoError("interrupted while waiting for the agent")
        if time.monotonic() > deadline:
            details = "; ".join(f"{DEMO_TOPIC}-{p}: rotated segments {r}, registered {g}" for p, (r, g) in missing.items())
            raise DemoError(f"the agent did not register every rotated segment within {timeout_s:.0f} s ({details})")
        time.sleep(0.2)


def show_uploads(entries: dict[int, list[SegmentEntry]], registry: Registry, log_dir: Path, bucket: str, s3: S3Server, metrics_url: str) -> None:
    """Print what the agent uploaded and registered, checked against the log.dir and S3."""
    all_entries = [e for p in sorted(entries) for e in entries[p]]
    total_bytes = sum(e.size for e in all_entries)
    ranges = ", ".join(f"0..{entries[p][-1].last_offset} of {DEMO_TOPIC}-{p}" for p in sorted(entries))
    print(
        f"agent uploaded {len(all_entries)} segments ({total_bytes / 2**20:.1f} MiB) to s3://{bucket}/{S3_PREFIX}/ "
        f"and registered offsets {ranges} in Redis"
    )
    for p in sorted(entries):
        partition = entries[p]
        active = segment_bases(log_dir, p)[-1]
        contiguous = all(a.last_offset + 1 == b.base_offset for a, b in zip(partition, partition[1:]))
        print(
            f"  {DEMO_TOPIC}-{p}: {len(partition)} segments registered, offsets {partition[0].base_offset}..{partition[-1].last_offset}"
            f"{'' if contiguous else ' (NOT contiguous)'}; the active segment on the broker starts at offset {active}"
        )
    example = all_entries[0]
    head = s3.client().head_object(Bucket=bucket, Key=example.object_key)
    print(f"example registry entry ({registry.keys(example.topic, example.partition).segment(example.base_offset)}):")
    print(f"  object_key   s3://{bucket}/{example.object_key}  ({head['ContentLength']} bytes in S3)")
    print(f"  offsets      {example.base_offset}..{example.last_offset}  ({example.record_count} records, leader epoch {example.leader_epoch})")
    print(f"  size         {example.size} bytes  checksum {example.checksum}  files {','.join(example.files)}")
    print(f"agent metrics: {metrics_url}")


class GatewayServer:
    """The gateway on uvicorn in a background thread (``stop()`` shuts it down)."""

    def __init__(self, settings: Any, port: int) -> None:
        import uvicorn

        from tiered_kafka_gateway.app import create_app

        self.url = f"http://127.0.0.1:{port}"
        self.settings = settings
        self._server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, name="gateway", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise DemoError("the gateway did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


def gateway_listener_port(gateway: GatewayServer) -> int:
    """The port of the gateway's Kafka listener (``gateway_settings`` configures one for the demo cluster)."""
    return int(gateway.settings.clusters[CLUSTER].kafka_listener.port)


def gateway_settings(redis_server: RedisServer, s3: S3Server, bucket: str, bootstrap: str) -> Any:
    from tiered_kafka_gateway.config import load_settings

    cluster = {
        "redis_url": redis_server.url,
        "s3": {
            "bucket": bucket,
            "prefix": S3_PREFIX,
            "entropy_bits": ENTROPY_BITS,
            "endpoint_url": s3.endpoint_url,
            "access_key_id": s3.access_key,
            "secret_access_key": s3.secret_key,
            "region": s3.region,
        },
        "bootstrap_servers": bootstrap,
        "kafka_listener": {"port": free_ports(1)[0]},  # any Kafka client reads the cluster through it (kafka_listener)
    }
    return load_settings(clusters={CLUSTER: cluster})


def read_through_gateway(gateway_url: str, entries: dict[int, list[SegmentEntry]], high_watermark: int) -> None:
    """What a client in any language does: plan, fetch a presigned range, or ask for JSON records."""
    partition_url = f"{gateway_url}/v1/clusters/{CLUSTER}/topics/{DEMO_TOPIC}/partitions/0"
    plan = _get_json(f"{partition_url}/plan?offset=0&max_bytes=65536")
    first = plan["ranges"][0]
    request = urllib.request.Request(first["url"], headers={"Range": first["range_header"]})
    data = urllib.request.urlopen(request, timeout=10).read()
    batches = list(iter_batches(data))
    print(
        f"gateway plan for {DEMO_TOPIC}-0 offset 0: {len(plan['ranges'])} range(s) of {plan['segment']['object_key']}; "
        f"the first ({first['size']} bytes, offsets {first['first_offset']}..{first['last_offset']}) fetched through its "
        f"presigned URL decodes to offsets {batches[0].base_offset}..{batches[-1].last_offset}"
    )
    remote_last = entries[0][-1].last_offset
    remote = _get_json(f"{partition_url}/records?offset={remote_last - 1}&max_records=2&mode=REMOTE_PREFERRED")
    hot = _get_json(f"{partition_url}/records?offset={remote_last + 1}&max_records=2&mode=REMOTE_PREFERRED")
    print(
        f"gateway records (REMOTE_PREFERRED): offsets {[r['offset'] for r in remote['records']]} came from {remote['source']}, "
        f"offsets {[r['offset'] for r in hot['records']]} from {hot['source']} (the broker's high watermark is {high_watermark})"
    )


def read_with_sdk(gateway_url: str, bootstrap: str, entries: dict[int, list[SegmentEntry]], high_watermarks: dict[int, int]) -> None:
    """Read the whole demo topic from offset 0 in each of the SDK's four modes; print where each
    partition's records came from. Kafka's log start of partition 0 is first moved past part of
    what is remote (DeleteRecords, as retention would), so KAFKA_PREFERRED has to fall back."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from tiered_kafka.consumer import Mode, TieredConsumer

    log_start = entries[0][len(entries[0]) // 2].base_offset
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(DEMO_TOPIC, 0, log_start)]).values():
        future.result(timeout=30)
    print(f"moved the broker's log start of {DEMO_TOPIC}-0 to offset {log_start} (DeleteRecords, as retention would)")
    for mode in Mode:
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": f"demo-sdk-{mode.value.lower()}",
            "auto.offset.reset": "earliest",
            "tiered.mode": mode.value,
            "tiered.gateway.url": gateway_url,
            "tiered.cluster": CLUSTER,
        }
        # REMOTE_ONLY reads what remote storage holds; the other modes read to the high watermark
        want = {p: (entries[p][-1].last_offset + 1 if mode is Mode.REMOTE_ONLY else high_watermarks[p]) for p in entries}
        if mode is Mode.KAFKA_ONLY:
            want[0] -= log_start  # what Kafka still holds of partition 0
        consumer = TieredConsumer(config)
        consumer.subscribe([DEMO_TOPIC])
        started = time.monotonic()
        got: dict[int, list[int]] = {p: [] for p in entries}
        try:
            while any(len(got[p]) < want[p] for p in entries) and time.monotonic() - started < 120:
                for message in consumer.consume(1000, 0.5):
                    if message.error() is not None:
                        raise DemoError(f"{mode.value}: {message.error()}")
                    got[message.partition()].append(message.offset())
            consumer.commit(asynchronous=False)
            sources = consumer.delivered_by_source()
        finally:
            consumer.close()
        parts = []
        for p in sorted(entries):
            offsets = got[p]
            exact = offsets == list(range(offsets[0], offsets[0] + len(offsets))) if offsets else False
            by = sources.get((DEMO_TOPIC, p), {})
            parts.append(
                f"{DEMO_TOPIC}-{p} offsets {offsets[0] if offsets else '-'}..{offsets[-1] if offsets else '-'} "
                f"({len(offsets)} records{'' if exact else ', NOT contiguous'}: {by.get('remote', 0)} remote, {by.get('kafka', 0)} kafka)"
            )
            if not exact or len(offsets) < want[p]:
                raise DemoError(f"{mode.value}: {DEMO_TOPIC}-{p} read {len(offsets)} records, expected {want[p]} in order")
        print(f"SDK {mode.value:<16} " + "; ".join(parts) + f" in {time.monotonic() - started:.1f} s")


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def cli_exports(gateway_url: str, cluster: str, bootstrap: str) -> dict[str, str]:
    """The ``export`` lines the ``tiered-kafka`` CLI reads (``tiered_kafka.cli.settings.SETTINGS``); the demo gateway has no token."""
    from tiered_kafka.cli.settings import SETTINGS

    values = {"gateway": gateway_url, "cluster": cluster, "bootstrap_servers": bootstrap}
    return {SETTINGS[name][0]: value for name, value in values.items()}


def try_command() -> str:
    """The one command ``make run`` suggests after its exports: the first records of partition 0, whose
    early offsets only remote storage still holds. ``tiered-kafka`` by its path when it is not on PATH."""
    import shutil

    cli = "tiered-kafka" if shutil.which("tiered-kafka") else shlex.quote(str(Path(sys.executable).parent / "tiered-kafka"))
    return f"{cli} cat {DEMO_TOPIC} 0 --to 10"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tiered_kafka_dev.stack", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000, help="sample records to produce")
    parser.add_argument("--exit-after-demo", action="store_true", help="stop everything after the demo (smoke tests)")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark part of the demo (it needs Java and ~40 s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    stop = threading.Event()
    waiting = threading.Event()  # the demo is done: a signal now only ends the wait

    def on_signal(*_: object) -> None:
        if stop.is_set():
            return  # already stopping: never cut the shutdown short
        stop.set()
        if not waiting.is_set():
            raise KeyboardInterrupt  # interrupt the demo where it is; the stages then unwind in order

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        with shutdown_stages(stop.set) as stages:  # stop set first: a signal while stopping is ignored
            services = []
            for launcher in (RedisServer, S3Server):
                print(f"starting {launcher.__name__} ...", file=sys.stderr, flush=True)
                services.append(stages["services"].enter_context(launcher()))
            redis_server = next(s for s in services if isinstance(s, RedisServer))
            s3 = next(s for s in services if isinstance(s, S3Server))
            bucket = s3.create_bucket(DEMO_BUCKET)
            print(f"starting {KafkaServer.__name__} ...", file=sys.stderr, flush=True)
            broker = stages["broker"].enter_context(KafkaServer())  # stop() also removes its log.dir
            log_dir, bootstrap = broker.log_dir, broker.bootstrap_servers

            print("starting the agent ...", file=sys.stderr, flush=True)
            metrics_port = free_ports(1)[0]
            settings = agent_settings(log_dir, broker.node_id, redis_server, bootstrap, s3, bucket, metrics_port)
            agent = Agent(settings)
            stages["agent"].callback(agent.stop)
            agent.start()
            metrics_url = f"http://{settings.metrics.host}:{metrics_port}/metrics"
            registry_client: Any = redis.Redis.from_url(redis_server.url)
            stages["readers"].callback(registry_client.close)
            registry = Registry(registry_client, CLUSTER)

            exports: dict[str, str] = {"TIERED_KAFKA_BOOTSTRAP_SERVERS": bootstrap}
            for service in services:
                lines, env = describe(service)
                print("\n".join(lines))
                exports.update(env)
            print(f"Kafka      {bootstrap}  (Apache Kafka {broker.version}, KRaft node {broker.node_id}, log.dirs {log_dir})")
            print(
                f"Agent      {metrics_url}  (in-process, broker {settings.broker_id}, cluster '{CLUSTER}', "
                f"leadership from Kafka's Admin API, uploads to s3://{bucket}/{S3_PREFIX}/)"
            )
            exports["TIERED_KAFKA_AGENT_METRICS_URL"] = metrics_url
            print()
            demo(bootstrap, log_dir, args.records)
            print(f"waiting (up to {UPLOAD_WAIT_S:.0f} s) for the agent to upload and register every rotated segment ...", file=sys.stderr, flush=True)
            entries = wait_for_uploads(registry, log_dir, stop)
            show_uploads(entries, registry, log_dir, bucket, s3, metrics_url)
            print("starting the gateway ...", file=sys.stderr, flush=True)
            gateway = GatewayServer(gateway_settings(redis_server, s3, bucket, bootstrap), free_ports(1)[0])
            stages["gateway"].callback(gateway.stop)
            print(f"Gateway    {gateway.url}  (OpenAPI at {gateway.url}/openapi.json, coverage at {gateway.url}/ui/)")
            from tiered_kafka_gateway.ui import UI_PREFIX  # the gateway's modules load with the gateway (GatewayServer)

            print(f"Coverage   {gateway.url}{UI_PREFIX}/  (the operator's view: remote segments, gaps and Kafka's range per partition)")
            exports["TIERED_KAFKA_GATEWAY_URL"] = gateway.url
            listener = f"127.0.0.1:{gateway_listener_port(gateway)}"
            print(f"Kafka listener {listener}  (Kafka's protocol, history from S3; try: kcat -C -b {listener} -t {DEMO_TOPIC} -o beginning -e)")
            exports["TIERED_KAFKA_LISTENER"] = listener
            read_through_gateway(gateway.url, entries, args.records // 2)
            print()
            high_watermarks = {p: (args.records + DEMO_PARTITIONS - 1 - p) // DEMO_PARTITIONS for p in range(DEMO_PARTITIONS)}
            read_with_sdk(gateway.url, bootstrap, entries, high_watermarks)
            if not args.no_spark:
                print()
                from tiered_kafka_dev.spark_demo import spark_demo

                spark_dir = Path(stages["readers"].enter_context(tempfile.TemporaryDirectory(prefix="tiered-kafka-spark-")))
                spark_demo(gateway.url, CLUSTER, DEMO_TOPIC, redis_server.url, spark_dir)
            print()
            exports.update(cli_exports(gateway.url, CLUSTER, bootstrap))
            for key, value in exports.items():
                print(f"export {key}={shlex.quote(value)}")
            print(f"\nthen try:  {try_command()}")
            sys.stdout.flush()
            if args.exit_after_demo:
                print("stopping ...", file=sys.stderr, flush=True)
                return 0
            waiting.set()
            print("\nRunning; press Ctrl-C to stop.", file=sys.stderr, flush=True)
            stop.wait()
            print("stopping ...", file=sys.stderr, flush=True)
        return 0
    except KeyboardInterrupt:  # a signal during the demo (ours, or PySpark's during the Spark stage)
        print("interrupted: stopped", file=sys.stderr, flush=True)
        return 130
    except (ServiceError, TieredKafkaError, DemoError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
