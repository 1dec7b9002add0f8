"""``tiered-kafka-backfill --format iceberg``: the command's side of ``spark_writer.backfill_iceberg``.

Exit status: 0 rows appended; 1 a failed read or commit, or nothing new or visible (never
silently empty: the message says the table holds every remote offset); 2 bad usage (a catalog
property, a table name, offsets the table cannot continue from).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tiered_kafka.errors import ConfigError


def run_iceberg_backfill(spark: Any, args: argparse.Namespace, topics: Sequence[str], stop_session: bool, cause: Callable[[BaseException], str]) -> int:
    """Run the Iceberg backfill on ``spark`` (stopped at the end when ``stop_session``); the exit status."""
    from tiered_kafka.iceberg.catalog import parse_properties
    from tiered_kafka.iceberg.spark_writer import backfill_iceberg

    try:
        result = backfill_iceberg(
            spark, gateway_url=args.gateway_url, cluster=args.cluster, topics=topics, table=args.table, catalog=args.catalog,
            catalog_properties=parse_properties(args.catalog_property), token=args.token, fail_on_data_loss=not args.allow_data_loss,
            read_committed=args.isolation_level == "read_committed", say=lambda line: print(line, flush=True),
        )
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # a clear one-line cause, not a JVM stack trace
        print(f"error: backfill failed: {cause(err)}; nothing committed", file=sys.stderr)
        return 1
    finally:
        if stop_session:
            spark.stop()
    if result.nothing_new:
        print(f"error: nothing new: {args.table} already holds every remote offset of {', '.join(topics)}", file=sys.stderr)
        return 1
    if result.rows == 0:
        print(f"error: read nothing visible (snapshot {result.snapshot_id} records the offsets passed)", file=sys.stderr)
        return 1
    return 0
