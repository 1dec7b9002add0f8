"""read_committed benchmark: the SDK and the gateway's records endpoint, read_committed beside read_uncommitted.

    .venv/bin/python bench/bench_txn.py [--segments 4] [--segment-mib 16] [--rounds 5]

Set-up: Redis and SeaweedFS (the tests' launchers); one transactional partition written with the
format core's log.dir writer (``PartitionLog`` + ``tests/support/batches.py``): 4 producers with
interleaved transactions of 4 batches of 16 records of 1 KiB (every 10th transaction aborted), a
non-transactional batch every 8 batches, every transaction ended before the last roll; the
``.txnindex`` of each segment as Kafka writes it (``format.txn_index``). The agent uploads and
registers it; the gateway (uvicorn) serves it. Each measured reader runs in its own process, and
rounds alternate the readers; the best round of each counts. Both isolation levels read the same
offsets 0..L (read_committed delivers fewer records: aborted ones are dropped), so each ratio is
offsets/s under read_committed over offsets/s under read_uncommitted, i.e. the reference's wall
time over the measured one.

1. **SDK**: ``TieredConsumer`` in REMOTE_ONLY (``consume(1000)``), ``isolation.level``
   read_committed beside read_uncommitted. Goal: ratio >= 0.9.
2. **gateway records endpoint**: ``GET .../records`` paged with ``next_offset`` (10,000 records,
   16 MiB a page, base64), ``isolation_level`` read_committed beside read_uncommitted. Goal >= 0.9.
CPU seconds of the reader process are printed beside its wall time (the gateway's CPU is not in
the records figure: it runs in its own process).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis

MIB = 1024 * 1024
TOPIC = "bench-txn"
HERE = Path(__file__).resolve().parent
PRODUCERS = 4
BATCHES_PER_TXN = 4
RECORDS_PER_BATCH = 16
VALUE = b"v" * 1024


# -- the data ------------------------------------------------------------------------------------------
def write_transactional_partition(directory: Path, segments: int, segment_bytes: int) -> dict[str, int]:
    """The partition of the module doc; returns what a reader of offsets 0..last must deliver."""
    sys.path.insert(0, str(HERE.parent))
    from tests.support.batches import Rec, build_control, build_v2
    from tiered_kafka.format import txn_index
    from tiered_kafka_dev.kafka_log.log_config import LogConfig
    from tiered_kafka_dev.kafka_log.log_writer import PartitionLog
    from tiered_kafka.format.record_batch import ControlRecordType
    from tiered_kafka.format.txn_index import AbortedTxn

    plog = PartitionLog.create(directory, LogConfig(segment_bytes=segment_bytes, retention_ms=-1))
    now = int(time.time() * 1000)
    records = [Rec(f"k{i}".encode(), VALUE, now + i) for i in range(RECORDS_PER_BATCH)]
    offset = data_records = aborted_records = txn_count = 0
    first_of: dict[int, int] = {}  # producer -> first offset of its open transaction
    batches_in: dict[int, int] = {}
    entries: dict[int, list[AbortedTxn]] = {}
    step = 0

    def end(producer: int) -> None:
        nonlocal offset, aborted_records, txn_count
        txn_count += 1
        abort = txn_count % 10 == 0
        plog.append(build_control(ControlRecordType.ABORT if abort else ControlRecordType.COMMIT, base_offset=0, producer_id=producer))
        if abort:
            aborted_records += batches_in[producer] * RECORDS_PER_BATCH
            others = [f for p, f in first_of.items() if p != producer]
            segment = plog.segment_base_offsets()[-1]
            entries.setdefault(segment, []).append(AbortedTxn(producer, first_of[producer], offset, min(others) if others else offset + 1))
        del first_of[producer], batches_in[producer]
        offset += 1

    while len(plog.segment_base_offsets()) <= segments:
        step += 1
        if step % 8 == 0:
            plog.append(build_v2(records))
        else:
            producer = step % PRODUCERS
            plog.append(build_v2(records, producer_id=producer, transactional=True))
            first_of.setdefault(producer, offset)
            batches_in[producer] = batches_in.get(producer, 0) + 1
        offset += RECORDS_PER_BATCH
        data_records += RECORDS_PER_BATCH
        for producer in [p for p, n in batches_in.items() if n >= BATCHES_PER_TXN]:
            end(producer)
    for producer in list(first_of):
        end(producer)
    plog.roll()
    for base, found in entries.items():
        (directory / f"{base:020d}.txnindex").write_bytes(txn_index.serialize(found))
    rotated = len(plog.segment_base_offsets()) - 1
    plog.close()
    from tiered_kafka_dev.kafka_log.high_watermarks import checkpoint_high_watermarks

    checkpoint_high_watermarks(directory.parent, [directory])  # as a broker would: the agent uploads only up to the high watermark
    return {"last": offset - 1, "uncommitted": data_records, "committed": data_records - aborted_records, "segments": rotated}


# -- the measured readers (each runs in a child process) ----------------------------------------------
def child_sdk(gateway_url: str, cluster: str, isolation: str, expected: int) -> dict[str, Any]:
    from confluent_kafka import TopicPartition

    from tiered_kafka.consumer import TieredConsumer

    consumer = TieredConsumer({"tiered.mode": "REMOTE_ONLY", "tiered.gateway.url": gateway_url, "tiered.cluster": cluster, "isolation.level": isolation})
    with contextlib.suppress(AttributeError):  # the client up before timing (where the consumer has it)
        consumer.get_watermark_offsets(TopicPartition(TOPIC, 0))
    start = progressed = time.perf_counter()
    cpu_start = time.process_time()
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    delivered, previous = 0, -1
    while delivered < expected:
        batch = consumer.consume(1000, 0.2)
        if batch:
            progressed = time.perf_counter()
        elif time.perf_counter() - progressed > 30:
            raise RuntimeError(f"no record for 30 s after offset {previous}")
        for message in batch:
            if message.error() is not None:
                raise RuntimeError(str(message.error()))
            if message.offset() <= previous:
                raise RuntimeError(f"offset {message.offset()} after {previous}")
            previous = message.offset()
            delivered += 1
    result = {"records": delivered, "elapsed": time.perf_counter() - start, "cpu_s": time.process_time() - cpu_start}
    consumer.close()
    return result


def child_gateway(gateway_url: str, cluster: str, isolation: str, last: int) -> dict[str, Any]:
    import httpx

    url = f"{gateway_url}/v1/clusters/{cluster}/topics/{TOPIC}/partitions/0/records"
    start = time.perf_counter()
    cpu_start = time.process_time()
    delivered, offset = 0, 0
    with httpx.Client(timeout=120) as client:
        while offset <= last:
            response = client.get(url, params={"offset": offset, "max_records": 10_000, "max_bytes": 16 * MIB, "isolation_level": isolation, "mode": "REMOTE_ONLY"})
            response.raise_for_status()
            body = response.json()
            delivered += len(body["records"])
            if body["next_offset"] <= offset:
                raise RuntimeError(f"no progress at offset {offset}: {str(body)[:300]}")
            offset = body["next_offset"]
    return {"records": delivered, "elapsed": time.perf_counter() - start, "cpu_s": time.process_time() - cpu_start}


def upload(settings: object, registry: Any, count: int) -> None:
    """The agent uploads and registers the partition's ``count`` rotated segments (as ``bench_agent.agent_upload``, for this topic)."""
    from tiered_kafka_agent.agent import Agent

    deadline = time.monotonic() + 600
    with Agent(settings):  # type: ignore[arg-type]
        while (info := registry.partition_info(TOPIC, 0)) is None or info.segment_count < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the agent registered {info} of {count} segments in 600 s")
            time.sleep(0.05)


def run_child(kind: str, *args: Any) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from bench_sdk import run_script_child  # noqa: E402

    return run_script_child(__file__, kind, *args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--segment-mib", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("child_args", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        readers = {"sdk": child_sdk, "gateway": child_gateway}
        print(json.dumps(readers[args.child](*json.loads(args.child_args))))
        return

    sys.path.insert(0, str(HERE))
    from bench_agent import settings_for  # noqa: E402
    from bench_gateway import gateway  # noqa: E402

    from tiered_kafka.registry import Registry
    from tiered_kafka_dev.services import RedisServer, S3Server

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:  # services stop before their directory goes
        print("starting Redis and SeaweedFS ...", file=sys.stderr, flush=True)
        redis_server = stack.enter_context(RedisServer())
        s3 = stack.enter_context(S3Server())
        bucket = s3.create_bucket("bench-txn")
        log_dir = Path(tmp) / "logs"
        print(f"writing {args.segments}+ transactional segments of ~{args.segment_mib} MiB and uploading them with the agent ...", file=sys.stderr, flush=True)
        data = write_transactional_partition(log_dir / f"{TOPIC}-0", args.segments, args.segment_mib * MIB)
        cluster = f"bench-{uuid.uuid4().hex[:8]}"
        registry = Registry(redis.Redis.from_url(redis_server.url), cluster)
        upload(settings_for(log_dir, redis_server.url, s3, bucket, cluster, 2), registry, data["segments"])
        info = registry.partition_info(TOPIC, 0)
        if info is None or info.latest_offset != data["last"]:
            raise RuntimeError(f"remote storage holds {info}, expected offsets 0..{data['last']}")
        with_index = sum(1 for s in registry.segments(TOPIC, 0) if "txnindex" in s.files)
        config = Path(tmp) / "gateway.json"
        config.write_text(json.dumps({"clusters": {cluster: {"redis_url": redis_server.url, "s3": {
            "bucket": bucket, "prefix": "", "entropy_bits": 0, "endpoint_url": s3.endpoint_url,
            "access_key_id": s3.access_key, "secret_access_key": s3.secret_key, "region": s3.region}}}}))
        port = stack.enter_context(gateway(config, 1))
        gateway_url = f"http://127.0.0.1:{port}"
        print(f"reading offsets 0..{data['last']} ({info.total_bytes / MIB:.0f} MiB) in {args.rounds} rounds ...", file=sys.stderr, flush=True)
        results: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for round_ in range(args.rounds):
            order = [("sdk", "read_committed"), ("sdk", "read_uncommitted"), ("gateway", "read_committed"), ("gateway", "read_uncommitted")]
            shift = round_ % 2  # alternate which isolation level goes first
            for kind, isolation in order if not shift else [order[1], order[0], order[3], order[2]]:
                arg = data["committed" if isolation == "read_committed" else "uncommitted"] if kind == "sdk" else data["last"]
                result = run_child(kind, gateway_url, cluster, isolation, arg)
                expected = data["committed" if isolation == "read_committed" else "uncommitted"]
                if result["records"] != expected:
                    raise RuntimeError(f"{kind} {isolation} delivered {result['records']} records, expected {expected}")
                results.setdefault((kind, isolation), []).append(result)
            print(f"  round {round_ + 1}: " + ", ".join(f"{k} {i} {r[-1]['elapsed']:.2f} s" for (k, i), r in results.items()), file=sys.stderr, flush=True)
        best = {key: min(runs, key=lambda r: r["elapsed"]) for key, runs in results.items()}
        offsets = data["last"] + 1
        print(
            f"\n{offsets:,} offsets ({data['uncommitted']:,} records of 1 KiB, {data['committed']:,} committed), {info.total_bytes / MIB:.1f} MiB in "
            f"{data['segments']} segments ({with_index} with a .txnindex); best of {args.rounds} rounds\n"
        )
        print(f"{'figure (offsets/s)':<44} {'measured':>12} {'reference':>12} {'ratio':>7}  goal")
        for kind, name in (("sdk", "SDK read_committed vs read_uncommitted"), ("gateway", "gateway records read_committed vs uncommitted")):
            committed, uncommitted = best[(kind, "read_committed")], best[(kind, "read_uncommitted")]
            measured, reference = offsets / committed["elapsed"], offsets / uncommitted["elapsed"]
            ratio = measured / reference
            print(f"{name:<44} {measured:>12,.0f} {reference:>12,.0f} {ratio:>7.3f}  >= 0.9  {'ok' if ratio >= 0.9 else 'MISSED'}")
        print(f"\n{'best runs':<44} {'records':>9} {'records/s':>10} {'CPU s':>7} {'wall s':>7}")
        for (kind, isolation), r in sorted(best.items()):
            print(f"  {kind + ' ' + isolation:<42} {r['records']:>9,} {r['records'] / r['elapsed']:>10,.0f} {r['cpu_s']:>7.2f} {r['elapsed']:>7.2f}")


if __name__ == "__main__":
    main()
