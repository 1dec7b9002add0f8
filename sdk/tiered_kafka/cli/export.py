"""``tiered-kafka export``: remote history to a Parquet or Arrow IPC file via the bulk API (an Iceberg table:
``tiered_kafka.iceberg.cli``).

The rules (what is read, errors, exit status) are in ``tiered_kafka.cli``'s module doc; this module
only parses the subcommand's arguments and writes the file, batch by batch (memory stays within
the reader's budget plus the writer's row group).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tiered_kafka.bulk import DEFAULT_MEMORY_BUDGET, BulkReader  # first: names the extra when pyarrow is missing
from tiered_kafka.errors import ConfigError, RemoteGapError, TieredKafkaError

import pyarrow as pa  # noqa: I001

def export(args: argparse.Namespace, describe: Callable[[BaseException], str]) -> int:
    """Run ``export``; the exit status (0 done, 1 nothing read or a failed read, 2 bad usage)."""
    if args.start is not None and args.partition is None or args.end is not None and args.partition is None:
        print("tiered-kafka: export: --from and --to need a partition", file=sys.stderr)
        return 2
    if args.format == "iceberg":
        from tiered_kafka.iceberg.cli import export_iceberg_command

        return export_iceberg_command(args, describe)
    if args.output is None or args.table is not None:
        print(f"tiered-kafka: export: --format {args.format} writes --output (--table is for --format iceberg)", file=sys.stderr)
        return 2
    where = args.topic if args.partition is None else f"{args.topic}-{args.partition}"
    partial = args.output.with_name(args.output.name + ".partial")
    try:
        reader = BulkReader(args.gateway, args.cluster, token=args.token, isolation_level=args.isolation_level, include_headers=args.include_headers,
                            skip_gaps=args.skip_gaps, memory_budget=DEFAULT_MEMORY_BUDGET if args.memory_mib is None else args.memory_mib * 1024 * 1024)
    except TieredKafkaError as err:
        print(f"tiered-kafka: export: {err}", file=sys.stderr)
        return 2
    try:
        with reader:
            rows = _write(reader.batches(args.topic, args.partition, args.start, args.end), reader.schema, args.format, partial)
            stats, held = reader.stats, reader.held_back
    except ConfigError as err:  # bad usage (an offset below 0, --from after --to, a partition the topic lacks)
        partial.unlink(missing_ok=True)
        print(f"tiered-kafka: export: {err}", file=sys.stderr)
        return 2
    except RemoteGapError as err:
        partial.unlink(missing_ok=True)
        print(f"tiered-kafka: {where}: read failed: {err.topic}-{err.partition}: remote storage lacks offsets {err.start_offset}..{err.end_offset} "
              f"({err.reason}) (--skip-gaps reads past it)", file=sys.stderr)
        return 1
    except (TieredKafkaError, OSError) as err:
        partial.unlink(missing_ok=True)
        print(f"tiered-kafka: {where}: read failed: {describe(err)}", file=sys.stderr)
        return 1
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    # what was held back (read_committed) is on stderr already: the reader's warning (columnar_read.finish_read)
    asked_empty = args.start is not None and args.end is not None and args.start == args.end
    if rows == 0 and not asked_empty:
        partial.unlink(missing_ok=True)
        why = f"a transaction open at offset {held[0].first_offset} has no marker yet" if held else f"no record there is visible under {args.isolation_level}"
        print(f"tiered-kafka: {where}: read nothing: {why}", file=sys.stderr)
        return 1
    os.replace(partial, args.output)
    print(f"tiered-kafka: {where}: wrote {rows} records to {args.output} ({args.format}; {stats.bytes} bytes read in {stats.gets} GETs)", file=sys.stderr)
    return 0


def _write(batches: Any, schema: pa.Schema, fmt: str, path: Path) -> int:
    """Write the batches as they come; the number of rows."""
    rows = 0
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetWriter(path, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
        return rows
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
            rows += batch.num_rows
    return rows
