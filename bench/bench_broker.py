"""Development broker benchmark: produce and consume throughput through confluent-kafka, and
the CPU time of the broker beside that of the consumer during a full consume.

    .venv/bin/python bench/bench_broker.py [--messages N] [--size BYTES] [--codec CODEC]

The broker runs as its own process (``python -m tiered_kafka_dev.broker``), so its CPU time is
read from /proc/<pid>/stat; the consumer runs in this process (librdkafka's threads included,
via ``time.process_time``). The goal: the broker uses less CPU than the consumer, since it only
serves file bytes while the consumer decodes them. The figures are printed side by side, as a
ratio, because this machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat (fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def start_broker(log_dir: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tiered_kafka_dev.broker", "--log-dir", str(log_dir), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"bootstrap\.servers=(\S+)", line)
    if match is None:
        process.kill()
        raise RuntimeError(f"the broker did not start: {line!r}")
    return process, match.group(1)


def produce(bootstrap: str, topic: str, count: int, size: int, codec: str) -> float:
    # half random, half text: compressed sizes like real payloads (identical values would compress away)
    text = b"the quick brown fox jumps over the lazy dog " * (size // 44 + 1)
    values = [os.urandom(size // 2) + text[: size - size // 2] for _ in range(256)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": codec, "queue.buffering.max.messages": 500_000})
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=values[i % 256], partition=i % 4)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError("messages left unsent")
    return time.perf_counter() - start


def consume(bootstrap: str, topic: str, count: int) -> tuple[float, float, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
    received = total_bytes = 0
    cpu_start, start = time.process_time(), time.perf_counter()
    while received < count:
        for message in consumer.consume(10_000, 1.0):
            if message.error():
                raise RuntimeError(message.error())
            received += 1
            total_bytes += len(message.value())
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    consumer.close()
    return elapsed, cpu, total_bytes


CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--codec", default="all", choices=["all", *CODECS])
    args = parser.parse_args()
    codecs = CODECS if args.codec == "all" else [args.codec]

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        broker, bootstrap = start_broker(Path(tmp) / "kafka-logs")
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for future in admin.create_topics([NewTopic(f"bench-{c}", 4, 1) for c in codecs]).values():
                future.result(30)
            for codec in codecs:
                topic = f"bench-{codec}"
                produce_s = produce(bootstrap, topic, args.messages, args.size, codec)
                broker_cpu_before = process_cpu_seconds(broker.pid)
                consume_s, consumer_cpu, consumed_bytes = consume(bootstrap, topic, args.messages)
                broker_cpu = process_cpu_seconds(broker.pid) - broker_cpu_before
                rows.append((codec, produce_s, consume_s, consumer_cpu, broker_cpu, consumed_bytes))
        finally:
            broker.terminate()
            broker.wait(30)

    mb = args.messages * args.size / 1e6
    print(f"development broker benchmark: {args.messages} messages of {args.size} B per codec, 4 partitions, one broker process")
    header = f"{'codec':8}{'produce msgs/s':>16}{'MB/s':>8}{'consume msgs/s':>16}{'MB/s':>8}{'broker CPU s':>14}{'consumer CPU s':>16}{'ratio':>7}  goal"
    print(header)
    for codec, produce_s, consume_s, consumer_cpu, broker_cpu, consumed_bytes in rows:
        ratio = broker_cpu / consumer_cpu
        print(
            f"{codec:8}{args.messages / produce_s:>16,.0f}{mb / produce_s:>8.1f}{args.messages / consume_s:>16,.0f}"
            f"{consumed_bytes / 1e6 / consume_s:>8.1f}{broker_cpu:>14.2f}{consumer_cpu:>16.2f}{ratio:>7.2f}  {'met' if ratio < 1 else 'NOT met'}"
        )
    print("ratio = broker CPU / consumer CPU during the full consume; goal: < 1.00 (the broker serves file bytes, the consumer decodes)")


if __name__ == "__main__":
    main()
