"""``tiered-kafka``: list and describe topics, cat or tail one partition in any consumption mode through
TieredConsumer, export remote history to Parquet, Arrow or Iceberg through the bulk API. What users read
is the parser's help (``HELP``, each subcommand's description and example); where the gateway, the
cluster, the token and Kafka come from: ``tiered_kafka.cli.settings``; ``topics`` and ``describe``:
``tiered_kafka.cli.describe``; why the commands are shaped so: docs/design-notes.md.

``cat`` reads ``--from`` (default: earliest) up to ``--to`` (exclusive; default: the end when the
command starts) and exits; ``tail`` goes on reading new records until Ctrl-C. Records go to
stdout, one per line: JSON (``--format json``: offset, timestamp, key, value, headers; bytes as
UTF-8 text when they are, else base64 with ``"encoding": "base64"``) or the bare value
(``--format value``). A progress bar (on stderr, when it is a terminal or with ``--progress``)
shows offsets read out of the range. No consumer group is joined: nothing is committed.

The end under read_committed is the last stable offset (Kafka's, as librdkafka's watermarks
report it under read_committed; for remote data, the remote last stable offset of
``tiered_kafka.transactions``: the first offset of the earliest transaction whose marker is not
in remote storage yet, also when ``--from`` is past it): ``cat`` stops there, saying so, and passes trailing control batches and
aborted records, which are never delivered.

Never silently empty: ``cat`` exits 0 with no output only for an empty range of an existing
partition (said on stderr). Asked for offsets it cannot read, it exits 1 naming why, with Kafka's
error name where there is one: TOPIC_AUTHORIZATION_FAILED (the gateway's 403),
UNKNOWN_TOPIC_OR_PART, OFFSET_OUT_OF_RANGE (``--from`` below the earliest offset the mode reads, or
past the end: an explicit ``--from`` is never moved by auto.offset.reset), a recorded gap
(``--skip-gaps`` reads past it, naming it on stderr), or no record visible in the range.
Exit status: 0 done, 1 a read failed or nothing of the range could be read (the message names the
offset and the cause), 2 bad usage.

``export`` reads a whole topic, or one partition's ``--from``/``--to``, with
``tiered_kafka.bulk.BulkReader`` (no per-record Python) and writes ``--output`` as Parquet
(``--format parquet``) or an Arrow IPC file (``--format arrow``), with the bulk API's columns
(``bulk.bulk_schema``; ``--include-headers`` adds ``headers``), or appends to an Iceberg table
(``tiered_kafka.iceberg.cli``). The file is written to ``PATH.partial`` and renamed when the read
succeeds, so a failed export leaves no file behind. The same rules as ``cat``: read_committed by
default, stopping at the remote last stable offset (what was held back is named on stderr); a
recorded gap fails unless ``--skip-gaps`` (each gap skipped is named); offsets not in remote storage
are OFFSET_OUT_OF_RANGE; an export that gets no record exits 1 (an empty range asked for explicitly
exits 0, writing a file with the columns and no row).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Message, TopicPartition

from tiered_kafka.cli.args import add_connection_arguments, add_export_arguments
from tiered_kafka.cli.settings import SETTINGS, Connection, resolve
from tiered_kafka.errors import ConfigError, GatewayRequestError, RemoteGapError, TieredKafkaError
from tiered_kafka.client.gateway import GatewayClient, PartitionExtent
from tiered_kafka.modes import Mode, reads_kafka, reads_remote
from tiered_kafka.client.remote_read import visible_until

if TYPE_CHECKING:
    from tiered_kafka.consumer import TieredConsumer

#: seconds without a record at one position before ``cat`` asks remote storage whether anything
#: visible is left before its end (an open transaction, or only control batches, end the read)
STALL_CHECK_S = 1.0


class Refused(TieredKafkaError):
    """Nothing (more) of what was asked can be read: the message says why (exit status 1)."""


def main(argv: list[str] | None = None) -> int:
    try:
        args, connection = _parse(argv)
    except ConfigError as err:
        print(f"tiered-kafka: {err}", file=sys.stderr)
        return 2
    _warnings_to_stderr()
    if args.command == "export":
        from tiered_kafka.cli.export import export  # (pyarrow's writers: loaded only for export)

        return export(args, error_text)
    if args.command in ("topics", "describe"):
        return _inspect(args, connection)
    from tiered_kafka.consumer import TieredConsumer  # (loaded only for cat and tail: a second of imports)

    config: dict[str, Any] = {
        **connection.kafka,
        "tiered.mode": args.mode,
        "group.id": "tiered-kafka-cli",
        "enable.auto.commit": False,
        "isolation.level": args.isolation_level,
        # an explicit --from is exact: an offset no tier holds is an error, never a silent reset
        "auto.offset.reset": "earliest" if args.start is None else "error",
    }
    if args.gateway:
        config.update({"tiered.gateway.url": args.gateway, "tiered.cluster": args.cluster})
    if args.token:
        config["tiered.gateway.token"] = args.token
    if args.bootstrap_servers:
        config["bootstrap.servers"] = args.bootstrap_servers
    if args.skip_gaps:
        config["tiered.remote.gap.policy"] = "skip"
    gateway: GatewayClient | None = None
    try:
        gateway = GatewayClient(args.gateway, args.cluster, token=args.token) if reads_remote(Mode(args.mode)) else None
        consumer = TieredConsumer(config)
    except (TieredKafkaError, KafkaException, ValueError) as err:
        if gateway is not None:
            gateway.close()
        print(f"tiered-kafka: {err}", file=sys.stderr)
        return 2
    except BaseException:
        if gateway is not None:
            gateway.close()
        raise
    try:
        return _run(consumer, gateway, args, sys.stdout)
    except KeyboardInterrupt:
        return 0
    except (TieredKafkaError, KafkaException) as err:
        return _failed(f"{args.topic}-{args.partition}", err, "read failed: ")
    finally:
        consumer.close()
        if gateway is not None:
            gateway.close()


def _inspect(args: argparse.Namespace, connection: Connection) -> int:
    """``topics`` or ``describe``: exit 0, or 1 naming why (Kafka's error name where there is one)."""
    from tiered_kafka.cli.describe import describe_command, topics_command

    try:
        return (topics_command if args.command == "topics" else describe_command)(args, connection, sys.stdout)
    except (TieredKafkaError, KafkaException) as err:
        return _failed("topics" if args.command == "topics" else args.topic, err)


def _failed(where: str, err: TieredKafkaError | KafkaException, prefix: str = "") -> int:
    """Say why on stderr (``Refused`` says it whole; other errors after ``prefix``); the exit status, 1."""
    print(f"tiered-kafka: {where}: {err if isinstance(err, Refused) else prefix + error_text(err)}", file=sys.stderr)
    return 1


def error_text(err: BaseException) -> str:
    """An error's message, with Kafka's error name first when it has one. (Not named ``describe``:
    importing the ``tiered_kafka.cli.describe`` submodule binds that name on this package, which
    replaced the function, so every failed ``topics`` or ``describe`` ended in a TypeError; issue 36.)"""
    if isinstance(err, KafkaException) and isinstance(err.args[0], KafkaError):
        return f"{err.args[0].name()}: {err.args[0].str()}"
    if isinstance(err, RemoteGapError):
        return f"{err} (--skip-gaps reads past it)"
    return str(err)


def _warnings_to_stderr() -> None:
    """The SDK's warnings (a skipped gap, a reset offset) go to stderr; nothing else is logged."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tiered-kafka: warning: %(message)s"))
    sdk = logging.getLogger("tiered_kafka")
    sdk.addHandler(handler)
    sdk.setLevel(logging.WARNING)


def _run(consumer: TieredConsumer, gateway: GatewayClient | None, args: argparse.Namespace, out: TextIO) -> int:
    mode = Mode(args.mode)
    tp = TopicPartition(args.topic, args.partition)
    extent = None if gateway is None else _extent(gateway, mode, args)
    low, high = consumer.get_watermark_offsets(tp)
    start = low if args.start is None else args.start
    end = None if args.command == "tail" else (high if args.end is None else args.end)
    if _check_range(args, mode, extent, low, high, start, end):
        return 0
    consumer.assign([TopicPartition(args.topic, args.partition, OFFSET_BEGINNING if args.start is None else start)])
    progress = _progress(args, start, end)
    written, stopped = 0, None
    idle_at, idle_since, checked = -1, 0.0, -1
    try:
        while end is None or (position := _position(consumer, tp)) < end:
            messages = consumer.consume(1000, 0.5)
            for message in messages:
                error = message.error()
                if error is not None:
                    raise Refused(f"{error.name()}: {error.str()}")
                if end is not None and message.offset() >= end:
                    break
                out.write(_format(message, args.format))
                out.write("\n")
                written += 1
            if progress is not None:
                progress.update(progress.task_ids[0], completed=min(_position(consumer, tp), end or 0) - start)
            if messages or end is None or gateway is None:
                continue
            if position != idle_at:
                idle_at, idle_since = position, time.monotonic()
            elif position != checked and time.monotonic() - idle_since >= STALL_CHECK_S:
                checked = position  # once per position: is anything visible left before the end?
                visible = visible_until(gateway, args.topic, args.partition, position, end, read_committed=args.isolation_level == "read_committed")
                if visible.known and not visible.has_records:
                    stopped = visible.stable_end if visible.stable_end < end else None
                    break
    finally:
        if progress is not None:
            progress.stop()
    out.flush()
    if stopped is not None:
        print(f"tiered-kafka: {args.topic}-{args.partition}: stopped at offset {stopped}, the last stable offset of remote storage "
              f"(read_committed: a transaction open there has no marker in remote storage yet)", file=sys.stderr)
    if written == 0:
        why = f"a transaction open at offset {stopped} has no marker yet" if stopped is not None else f"no record there is visible under {args.isolation_level}"
        raise Refused(f"read nothing of offsets {start}..{(end or start) - 1}: {why}")
    return 0


def _extent(gateway: GatewayClient, mode: Mode, args: argparse.Namespace) -> PartitionExtent | None:
    """What the gateway knows of the partition (TOPIC_AUTHORIZATION_FAILED is raised from here);
    None when it knows nothing and the mode may still find it in Kafka."""
    try:
        return gateway.partition(args.topic, args.partition)
    except GatewayRequestError as err:
        if err.code != "unknown_topic_or_partition":
            raise
        if not reads_kafka(mode):
            raise Refused(f"UNKNOWN_TOPIC_OR_PART: remote storage holds no data of it and the gateway's Kafka cluster does not know it ({err})") from err
        return None


def _check_range(args: argparse.Namespace, mode: Mode, extent: PartitionExtent | None, low: int, high: int, start: int, end: int | None) -> bool:
    """Refuse a range the mode cannot read (``Refused``); True when it is empty and nothing was asked."""
    if not reads_kafka(mode) and extent is not None and extent.remote is None:
        kafka_low, kafka_high = extent.kafka_log_start_offset, extent.kafka_high_watermark
        if kafka_high is not None and kafka_low is not None and kafka_high > kafka_low:
            raise Refused(f"remote storage holds none of it (Kafka holds offsets {kafka_low}..{kafka_high - 1}); REMOTE_ONLY reads remote storage only: give --bootstrap-servers to read Kafka")
    if start < low:
        source = "remote storage's earliest offset" if not reads_kafka(mode) else "the earliest offset of the tiers the mode reads"
        raise Refused(f"OFFSET_OUT_OF_RANGE: offsets {start}..{low - 1} are not readable in {mode.value}: {source} is {low}")
    if end is None or start < end:
        return False
    if start > end or (args.start is not None and args.end is None):
        raise Refused(f"OFFSET_OUT_OF_RANGE: nothing to read from offset {start}: the end is {high} (tail waits for new records)")
    print(f"tiered-kafka: {args.topic}-{args.partition}: nothing to read: offsets {start}..{end - 1} is an empty range", file=sys.stderr)
    return True


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


HELP = """\
Read Kafka topics whose older history lives in remote storage (S3, through a tiered-kafka gateway)
and whose recent records are in Kafka.

Where to read: the options, else these environment variables, else a configuration file
(-F FILE, else $TIERED_KAFKA_CONFIG, else ~/.config/tiered-kafka/config; key=value lines):
  TIERED_KAFKA_GATEWAY_URL         tiered.gateway.url=http://gw:8080
  TIERED_KAFKA_CLUSTER             tiered.cluster=prod
  TIERED_KAFKA_TOKEN               tiered.gateway.token=...   (chmod 600 the file)
  TIERED_KAFKA_BOOTSTRAP_SERVERS   bootstrap.servers=kafka:9092
The file's other keys (security.protocol, sasl.mechanism, ...) go to the Kafka client.

examples:
  export TIERED_KAFKA_GATEWAY_URL=http://gw:8080 TIERED_KAFKA_CLUSTER=prod
  tiered-kafka topics
  tiered-kafka describe orders
  tiered-kafka cat orders 3 --from 0 --to 1000 > orders-3.jsonl

exit status: 0 done; 1 nothing (more) could be read, the message says why (with Kafka's error
name, e.g. UNKNOWN_TOPIC_OR_PART, TOPIC_AUTHORIZATION_FAILED, OFFSET_OUT_OF_RANGE); 2 bad usage.
"""

#: name -> (one line for the command list, what it does, its example)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "topics": (
        "list topics with partition counts and what remote storage holds",
        "List the cluster's topics that have remote data (those the token may read) with their partition count and\n"
        "remote bytes, segments and offsets; with bootstrap servers, Kafka's topics too.",
        "tiered-kafka topics --json",
    ),
    "describe": (
        "show each partition of a topic: remote range, Kafka's range, gaps",
        "For each partition of TOPIC: the offsets in remote storage and in Kafka, where remote coverage starts,\n"
        "recorded gaps with their reasons, remote bytes and the oldest remote timestamp.",
        "tiered-kafka describe orders --json",
    ),
    "cat": (
        "write a range of offsets of one partition to stdout and exit",
        "Write the records of one partition from --from (default: the earliest) up to --to (exclusive; default:\n"
        "the end now) to stdout, one JSON object per line (offset, timestamp, key, value, headers), then exit.\n"
        "Reads remote storage through the gateway and, with bootstrap servers, Kafka.",
        "tiered-kafka cat orders 3 --from 0 --to 100000 > orders-3.jsonl",
    ),
    "tail": (
        "write one partition's records to stdout and follow new ones",
        "Like cat, then wait for new records and write them as they arrive, until Ctrl-C.",
        "tiered-kafka tail orders 3 --format value",
    ),
    "export": (
        "write remote history to a Parquet, Arrow IPC file or Iceberg table",
        "Read a topic (or one partition's --from/--to) from remote storage in bulk and write a Parquet file,\n"
        "an Arrow IPC file, or append to an Iceberg table (a rerun appends only what is new).",
        "tiered-kafka export orders --format parquet --output orders.parquet",
    ),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tiered-kafka", description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str) -> argparse.ArgumentParser:
        summary, text, example = COMMANDS[name]
        return commands.add_parser(name, help=summary, description=text, epilog=f"example:\n  {example}", formatter_class=argparse.RawDescriptionHelpFormatter)

    sub = command("topics")
    add_connection_arguments(sub)
    sub.add_argument("--json", action="store_true", help="print one JSON document (default: a table)")
    sub = command("describe")
    sub.add_argument("topic")
    add_connection_arguments(sub)
    sub.add_argument("--json", action="store_true", help="print one JSON document (default: a table)")
    for name in ("cat", "tail"):
        sub = command(name)
        sub.add_argument("topic")
        sub.add_argument("partition", type=int)
        add_connection_arguments(sub)
        sub.add_argument("--mode", default=None, choices=[m.value for m in Mode], help="where to read (default: REMOTE_ONLY without bootstrap servers, else REMOTE_PREFERRED)")
        sub.add_argument("--from", dest="start", type=int, help="first offset (default: earliest)")
        if name == "cat":
            sub.add_argument("--to", dest="end", type=int, help="end offset, exclusive (default: the end now)")
        sub.add_argument("--format", choices=["json", "value"], default="json", help="json: one object per record (default); value: the bare value")
        sub.add_argument("--isolation-level", choices=["read_committed", "read_uncommitted"], default="read_committed")
        sub.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
        sub.add_argument("--skip-gaps", action="store_true", help="read past gaps recorded in remote storage (each is named on stderr) instead of failing")
        sub.set_defaults(end=None)
    add_export_arguments(command("export"))
    return parser


def _parse(argv: list[str] | None) -> tuple[argparse.Namespace, Connection]:
    """The arguments, with the gateway, cluster, token and bootstrap servers resolved (``cli.settings``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    connection = resolve(args)
    args.gateway, args.cluster, args.token = connection.gateway, connection.cluster, connection.token
    if args.command == "export" or args.command in ("topics", "describe"):
        if not (args.gateway and args.cluster):
            parser.error(f"{args.command} reads the gateway: give --gateway and --cluster (or set {SETTINGS['gateway'][0]} and {SETTINGS['cluster'][0]})")
        return args, connection
    args.bootstrap_servers = connection.bootstrap_servers
    if args.mode is None:
        args.mode = Mode.REMOTE_PREFERRED.value if args.bootstrap_servers else Mode.REMOTE_ONLY.value
    if reads_remote(Mode(args.mode)) and not (args.gateway and args.cluster):
        parser.error(f"mode {args.mode} reads remote storage: give --gateway and --cluster (or set {SETTINGS['gateway'][0]} and {SETTINGS['cluster'][0]})")
    return args, connection
