"""``tiered-kafka``: cat or tail one partition, in any consumption mode, through TieredConsumer.

    tiered-kafka cat  --gateway http://gw:8080 --cluster prod orders 3 --from 0 --to 100000 > out.jsonl
    tiered-kafka tail --gateway http://gw:8080 --cluster prod --bootstrap-servers k:9092 orders 3

``cat`` reads ``--from`` (default: earliest) up to ``--to`` (exclusive; default: the end when the
command starts) and exits; ``tail`` goes on reading new records until Ctrl-C. Records go to
stdout, one per line: JSON (``--format json``: offset, timestamp, key, value, headers; bytes as
UTF-8 text when they are, else base64 with ``"encoding": "base64"``) or the bare value
(``--format value``). A progress bar (on stderr, when it is a terminal or with ``--progress``)
shows offsets read out of the range. No consumer group is joined: nothing is committed.
Exit status: 0 done, 1 a read failed (the message names the offset and the cause), 2 bad usage.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any, TextIO

from confluent_kafka import OFFSET_BEGINNING, KafkaException, Message, TopicPartition

from tiered_kafka.consumer import Mode, TieredConsumer
from tiered_kafka.errors import TieredKafkaError


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    config: dict[str, Any] = {
        "tiered.mode": args.mode,
        "group.id": "tiered-kafka-cli",
        "enable.auto.commit": False,
        "isolation.level": args.isolation_level,
        "auto.offset.reset": "earliest",
    }
    if args.gateway:
        config.update({"tiered.gateway.url": args.gateway, "tiered.cluster": args.cluster})
    if args.token:
        config["tiered.gateway.token"] = args.token
    if args.bootstrap_servers:
        config["bootstrap.servers"] = args.bootstrap_servers
    try:
        consumer = TieredConsumer(config)
    except (TieredKafkaError, KafkaException, ValueError) as err:
        print(f"tiered-kafka: {err}", file=sys.stderr)
        return 2
    try:
        return _run(consumer, args, sys.stdout)
    except KeyboardInterrupt:
        return 0
    except (TieredKafkaError, KafkaException) as err:
        print(f"tiered-kafka: read failed: {err}", file=sys.stderr)
        return 1
    finally:
        consumer.close()


def _run(consumer: TieredConsumer, args: argparse.Namespace, out: TextIO) -> int:
    tp = TopicPartition(args.topic, args.partition)
    low, high = consumer.get_watermark_offsets(tp)
    start = low if args.start is None else args.start
    end = None if args.command == "tail" else (high if args.end is None else args.end)
    consumer.assign([TopicPartition(args.topic, args.partition, OFFSET_BEGINNING if args.start is None else start)])
    progress = _progress(args, start, end)
    try:
        while end is None or _position(consumer, tp) < end:
            for message in consumer.consume(1000, 0.5):
                if message.error() is not None:
                    print(f"tiered-kafka: {message.error()}", file=sys.stderr)
                    return 1
                if end is not None and message.offset() >= end:
                    break
                out.write(_format(message, args.format))
                out.write("\n")
            if progress is not None:
                progress.update(progress.task_ids[0], completed=min(_position(consumer, tp), end or 0) - start)
    finally:
        if progress is not None:
            progress.stop()
    out.flush()
    return 0


def _position(consumer: TieredConsumer, tp: TopicPartition) -> int:
    return int(consumer.position([tp])[0].offset)


def _progress(args: argparse.Namespace, start: int, end: int | None) -> Any:
    if end is None or end <= start or not (args.progress or sys.stderr.isatty()):
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    from rich.console import Console

    progress = Progress(TextColumn(f"{args.topic}-{args.partition}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=Console(file=sys.stderr), transient=False)
    progress.add_task("read", total=end - start)
    progress.start()
    return progress


def _format(message: Message, fmt: str) -> str:
    if fmt == "value":
        value = message.value()
        return "" if value is None else value.decode("utf-8", errors="replace")
    ts_type, ts = message.timestamp()
    body: dict[str, Any] = {"offset": message.offset(), "timestamp": ts if ts_type else None}
    body.update(_bytes_field("key", message.key()))
    body.update(_bytes_field("value", message.value()))
    body["headers"] = [{"key": k, **_bytes_field("value", v)} for k, v in (message.headers() or [])]
    return json.dumps(body, ensure_ascii=False)


def _bytes_field(name: str, data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {name: base64.b64encode(data).decode("ascii"), f"{name}_encoding": "base64"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tiered-kafka", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("cat", "read a range of offsets and exit"), ("tail", "read from an offset on, following new records")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("topic")
        sub.add_argument("partition", type=int)
        sub.add_argument("--gateway", help="gateway URL (TieredConsumer's tiered.gateway.url)")
        sub.add_argument("--cluster", help="cluster name at the gateway (tiered.cluster)")
        sub.add_argument("--token", help="gateway token (tiered.gateway.token)")
        sub.add_argument("--bootstrap-servers", help="Kafka, for the modes that read it")
        sub.add_argument("--mode", default=None, choices=[m.value for m in Mode], help="default: REMOTE_ONLY without --bootstrap-servers, else REMOTE_PREFERRED")
        sub.add_argument("--from", dest="start", type=int, help="first offset (default: earliest)")
        if name == "cat":
            sub.add_argument("--to", dest="end", type=int, help="end offset, exclusive (default: the end now)")
        sub.add_argument("--format", choices=["json", "value"], default="json")
        sub.add_argument("--isolation-level", choices=["read_committed", "read_uncommitted"], default="read_committed")
        sub.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
        sub.set_defaults(end=None)
    return parser


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.mode is None:
        args.mode = Mode.REMOTE_PREFERRED.value if args.bootstrap_servers else Mode.REMOTE_ONLY.value
    if args.mode != Mode.KAFKA_ONLY.value and not (args.gateway and args.cluster):
        parser.error(f"mode {args.mode} reads remote storage: give --gateway and --cluster")
    return args


if __name__ == "__main__":
    sys.exit(main())
