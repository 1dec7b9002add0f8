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
    value = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": codec, "queue.buffering.max.messages": 500_000})
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % 4)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError("messages left unsent")
    return time.perf_counter() - start


def consume(bootstrap: str, topic: str, count: int) -> tuple[float, float, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800})
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--codec", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        broker, bootstrap = start_broker(Path(tmp) / "kafka-logs")
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for future in admin.create_topics([NewTopic("bench", 4, 1)]).values():
                future.result(30)
            produce_s = produce(bootstrap, "bench", args.messages, args.size, args.codec)
            broker_cpu_before = process_cpu_seconds(broker.pid)
            consume_s, consumer_cpu, consumed_bytes = consume(bootstrap, "bench", args.messages)
            broker_cpu = process_cpu_seconds(broker.pid) - broker_cpu_before
        finally:
            broker.terminate()
            broker.wait(30)

    mb = args.messages * args.size / 1e6
    print(f"development broker benchmark: {args.messages} messages of {args.size} B, codec {args.codec}, 4 partitions")
    print(f"{'':24}{'msgs/s':>12}{'MB/s':>10}")
    print(f"{'produce':24}{args.messages / produce_s:>12,.0f}{mb / produce_s:>10.1f}")
    print(f"{'consume':24}{args.messages / consume_s:>12,.0f}{consumed_bytes / 1e6 / consume_s:>10.1f}")
    print(f"CPU during the full consume: broker {broker_cpu:.2f} s, consumer {consumer_cpu:.2f} s, ratio broker/consumer {broker_cpu / consumer_cpu:.2f}")
    verdict = "met" if broker_cpu < consumer_cpu else "NOT met"
    print(f"goal: the broker uses less CPU than the consumer (ratio < 1.00): {verdict}")


if __name__ == "__main__":
    main()
