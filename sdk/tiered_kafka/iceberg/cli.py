"""``tiered-kafka export --format iceberg``: append what is new of a topic to its Iceberg table.

::

    tiered-kafka export --gateway http://gw:8080 --cluster prod orders --format iceberg --table kafka.orders \\
        --catalog-property warehouse=s3://lake/warehouse --catalog-property s3.endpoint=http://s3:8333 ...

The rules are ``export``'s module doc (incremental, exactly once; failOnDataLoss is ``--skip-gaps``
off) and ``tiered_kafka.cli``'s (read_committed by default; exit 0 done, 1 a failed read or nothing
new, 2 bad usage). What the run did goes to stderr: per partition the offsets read, the coverage
start of a partition new to the table, each gap skipped, what is held back by an open transaction,
then the snapshot committed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from tiered_kafka.errors import ConfigError, RemoteGapError, TieredKafkaError


def export_iceberg_command(args: argparse.Namespace, describe: Callable[[BaseException], str]) -> int:
    """Run ``export --format iceberg``; the exit status."""
    if args.table is None or args.output is not None:
        print("tiered-kafka: export: --format iceberg appends to --table namespace.name (not --output)", file=sys.stderr)
        return 2
    if (args.start is not None or args.end is not None) and args.partition is None:
        print("tiered-kafka: export: --from and --to need a partition", file=sys.stderr)
        return 2
    from tiered_kafka.bulk import DEFAULT_MEMORY_BUDGET
    from tiered_kafka.iceberg.catalog import parse_properties
    from tiered_kafka.iceberg.export import export_iceberg

    where = args.topic if args.partition is None else f"{args.topic}-{args.partition}"

    def say(line: str) -> None:
        print(f"tiered-kafka: {line}", file=sys.stderr, flush=True)

    try:
        result = export_iceberg(
            args.gateway, args.cluster, args.topic, args.partition, table=args.table, catalog=args.catalog,
            catalog_properties=parse_properties(args.catalog_property), start_offset=args.start, end_offset=args.end,
            fail_on_data_loss=not args.skip_gaps, isolation_level=args.isolation_level, token=args.token, say=say,
            memory_budget=DEFAULT_MEMORY_BUDGET if args.memory_mib is None else args.memory_mib * 1024 * 1024,
        )
    except ConfigError as err:
        print(f"tiered-kafka: export: {err}", file=sys.stderr)
        return 2
    except RemoteGapError as err:
        print(f"tiered-kafka: {where}: read failed: {err.topic}-{err.partition}: remote storage lacks offsets {err.start_offset}..{err.end_offset} "
              f"({err.reason}) (--skip-gaps reads past it); nothing committed", file=sys.stderr)
        return 1
    except (TieredKafkaError, OSError) as err:
        print(f"tiered-kafka: {where}: read failed: {describe(err)}; nothing committed", file=sys.stderr)
        return 1
    for gap in result.gaps:
        say(f"{gap.topic}-{gap.partition}: skipped offsets {gap.start}..{gap.end} ({gap.reason})")
    if result.nothing_new:
        at = ", ".join(f"{t}-{p} at {o}" for (t, p), o in sorted(result.starts.items())) or "no partition has remote data"
        print(f"tiered-kafka: {where}: read nothing: the table {args.table} already holds every remote offset ({at})", file=sys.stderr)
        return 1
    ends = ", ".join(f"{t}-{p}: {o}" for (t, p), o in sorted(result.next_offsets.items()))
    if result.rows == 0:
        print(f"tiered-kafka: {where}: read nothing visible under {args.isolation_level} (snapshot {result.snapshot_id} records next offsets {ends})",
              file=sys.stderr)
        return 1
    say(f"{where}: appended {result.rows} records in {result.data_files} data files to {args.table} (snapshot {result.snapshot_id}; "
        f"next offsets {ends}; {result.stats.bytes} bytes read in {result.stats.gets} GETs)")
    return 0
