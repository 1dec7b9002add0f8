"""Arguments of ``tiered-kafka``'s subcommands that are not its own parser's: where to read (every
subcommand: ``add_connection_arguments``; resolved by ``cli.settings``) and ``export``'s (apart from
``cli.export`` so that the parser is built without loading the bulk reader and its writers).
Rules: ``tiered_kafka.cli``'s module doc."""

from __future__ import annotations

import argparse
from pathlib import Path

FORMATS = ("parquet", "arrow", "iceberg")


def add_connection_arguments(sub: argparse.ArgumentParser, *, kafka: bool = True) -> None:
    """Where to read: each option also comes from the environment or the configuration file
    (``cli.settings``; the command line wins). ``kafka``: the subcommand reads Kafka too."""
    group = sub.add_argument_group("where to read (each also from the environment or the configuration file: see tiered-kafka --help)")
    group.add_argument("-F", "--config", type=Path, metavar="FILE", help="configuration file, key=value (default: $TIERED_KAFKA_CONFIG, else ~/.config/tiered-kafka/config)")
    group.add_argument("--gateway", metavar="URL", help="gateway URL ($TIERED_KAFKA_GATEWAY_URL, tiered.gateway.url)")
    group.add_argument("--cluster", help="cluster name at the gateway ($TIERED_KAFKA_CLUSTER, tiered.cluster)")
    group.add_argument("--token-file", type=Path, metavar="FILE", help="read the gateway token from FILE")
    group.add_argument("--token", help="gateway token: visible to every local user in ps; prefer $TIERED_KAFKA_TOKEN, --token-file or tiered.gateway.token in the configuration file")
    if kafka:
        group.add_argument("--bootstrap-servers", metavar="HOSTS", help="Kafka's bootstrap servers ($TIERED_KAFKA_BOOTSTRAP_SERVERS, bootstrap.servers)")


def add_export_arguments(sub: argparse.ArgumentParser) -> None:
    """The ``export`` subcommand's arguments."""
    sub.add_argument("topic")
    sub.add_argument("partition", type=int, nargs="?", help="one partition (default: every partition of the topic)")
    add_connection_arguments(sub, kafka=False)
    sub.add_argument("--from", dest="start", type=int, help="first offset (default: remote storage's earliest)")
    sub.add_argument("--to", dest="end", type=int, help="end offset, exclusive (default: remote storage's end now)")
    sub.add_argument("--format", choices=FORMATS, required=True, help="parquet, arrow (an Arrow IPC file), or iceberg (append to --table)")
    sub.add_argument("--output", type=Path, help="parquet, arrow: the file to write (replaced when the export succeeds)")
    sub.add_argument("--table", help="iceberg: the table, namespace.name (created when missing; each run appends what is new)")
    sub.add_argument("--catalog", default="tiered_kafka", help="iceberg: the catalog's name in PyIceberg's configuration (default tiered_kafka)")
    sub.add_argument("--catalog-property", action="append", default=[], metavar="KEY=VALUE",
                     help="iceberg: a PyIceberg catalog property (repeat: warehouse=s3://bucket/path, uri=..., s3.endpoint=...); "
                     "default catalog: SQL on ./tiered-kafka-iceberg.db")
    sub.add_argument("--isolation-level", choices=["read_committed", "read_uncommitted"], default="read_committed")
    sub.add_argument("--include-headers", action="store_true", help="add the headers column")
    sub.add_argument("--skip-gaps", action="store_true", help="read past gaps recorded in remote storage (each is named on stderr) instead of failing")
    sub.add_argument("--memory-mib", type=int, help="the reader's memory budget in MiB (default: the bulk API's, 256)")
