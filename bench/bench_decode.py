"""Decode benchmark of tiered_kafka.format.record_batch against reference Kafka readers.

Run from the repository root::

    .venv/bin/python bench/bench_decode.py           # full run, under ~3 minutes
    .venv/bin/python bench/bench_decode.py --quick   # smoke run, a few seconds

For each dataset (the broker-written fixtures, then generated segments of 1 KiB records in
every codec and two batch sizes) it first checks that all readers decode the same records
and all reject a corrupted CRC, then times them in interleaved rounds and prints our
throughput beside the fastest reference's, measured on the same bytes in the same run.
It reports; it does not assert: the exit status is 0 even when the goal is missed, and
nonzero only on errors (a reader disagreeing, a crash).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import platform
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import version

from decode_data import BATCH_SIZES, RECORD_VALUE_SIZE, Dataset, fixture_datasets, generate_records, generated_datasets
from decode_readers import ALL_READERS, OURS, OURS_ITER_RECORDS, REFERENCE_READERS, Collector, read_dataset
from interleaved_timing import Timing, time_interleaved

from tiered_kafka.format.record_batch import DECODER_IMPLEMENTATION

GOAL_RATIO = 0.90
MB = 1_000_000


@dataclass(frozen=True)
class Settings:
    """How much data and how many rounds."""

    name: str
    generated_records: int
    rounds: int
    min_sample_seconds: float
    first_fixture_segment_only: bool


FULL = Settings(name="full", generated_records=24 * 1024, rounds=15, min_sample_seconds=0.05, first_fixture_segment_only=False)
QUICK = Settings(name="quick", generated_records=512, rounds=3, min_sample_seconds=0.002, first_fixture_segment_only=True)


class DecodeMismatch(Exception):
    """Two readers disagree about a dataset's records: the timings would be meaningless."""


@dataclass(frozen=True)
class Result:
    """The timings of every reader on one dataset."""

    dataset: Dataset
    timings: dict[str, Timing]

    def records_per_second(self, reader: str, *, median: bool = False) -> float:
        timing = self.timings[reader]
        return self.dataset.records / (timing.median if median else timing.best)

    @property
    def best_reference(self) -> str:
        return max(REFERENCE_READERS, key=self.records_per_second)

    def ratio(self, reader: str = OURS, *, median: bool = False) -> float:
        reference = self.records_per_second(self.best_reference, median=median)
        return self.records_per_second(reader, median=median) / reference

    @property
    def meets_goal(self) -> bool:
        return self.ratio() >= GOAL_RATIO


# -- checks before timing ---------------------------------------------------------------------


def verify(dataset: Dataset) -> None:
    """Every reader must yield the expected count and the same records as the first reference."""
    decoded = {}
    for name, reader in ALL_READERS.items():
        collector = Collector()
        count = read_dataset(reader, dataset.segments, collector)
        if count != dataset.records or len(collector.records) != dataset.records:
            raise DecodeMismatch(f"{dataset.name}/{dataset.codec}: {name} read {count} records, expected {dataset.records}")
        decoded[name] = collector.records
    baseline_name = next(iter(REFERENCE_READERS))
    baseline = decoded[baseline_name]
    for name, records in decoded.items():
        if records != baseline:
            index = next(i for i, (ours, theirs) in enumerate(zip(records, baseline)) if ours != theirs)
            raise DecodeMismatch(
                f"{dataset.name}/{dataset.codec}: record #{index} differs: {name} {records[index][:3]!r:.200} "
                f"vs {baseline_name} {baseline[index][:3]!r:.200}"
            )


def verify_crc_detection(dataset: Dataset, position: int = 70) -> None:
    """Every reader must reject the first segment with one byte flipped inside its first batch's
    CRC-covered records: proof that each one really pays for CRC validation."""
    corrupted = bytearray(dataset.segments[0])
    corrupted[position] ^= 0xFF
    for name, reader in ALL_READERS.items():
        try:
            read_dataset(reader, [bytes(corrupted)])
        except Exception as err:  # noqa: BLE001 - any reader's own CRC error type
            if "crc" not in str(err).lower():
                raise DecodeMismatch(f"{dataset.name}/{dataset.codec}: {name} failed without a CRC error: {err!r}") from err
        else:
            raise DecodeMismatch(f"{dataset.name}/{dataset.codec}: {name} accepted a corrupted CRC")


# -- measuring ------------------------------------------------------------------------------


def measure(dataset: Dataset, settings: Settings) -> Result:
    """Check, then time every reader on ``dataset``."""
    started = time.perf_counter()
    verify(dataset)
    verify_crc_detection(dataset)
    candidates = {
        name: functools.partial(read_dataset, reader, dataset.segments) for name, reader in ALL_READERS.items()
    }
    timings = time_interleaved(candidates, rounds=settings.rounds, min_sample_seconds=settings.min_sample_seconds)
    result = Result(dataset, timings)
    print(
        f"  {dataset.name:<18} {dataset.codec:<7} ratio {result.ratio():.2f}  ({time.perf_counter() - started:.1f}s)",
        file=sys.stderr,
    )
    return result


def all_datasets(settings: Settings) -> Iterable[Dataset]:
    """The fixtures, then the generated datasets (built one at a time)."""
    yield from fixture_datasets(first_segment_only=settings.first_fixture_segment_only)
    yield from generated_datasets(generate_records(settings.generated_records))


# -- reporting ------------------------------------------------------------------------------


def format_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns right-aligned except the first two (dataset, codec)."""
    rows = [list(header), *map(list, rows)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) if column < 2 else cell.rjust(width) for column, (cell, width) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def summary_row(result: Result) -> list[str]:
    dataset = result.dataset
    seconds = result.timings[OURS].best
    return [
        dataset.name,
        dataset.codec,
        f"{dataset.records / dataset.batches:.0f}",
        f"{dataset.records:,}",
        f"{dataset.size / MB:.1f}",
        _rate(result.records_per_second(OURS)),
        f"{dataset.size / MB / seconds:.0f}",
        result.best_reference,
        _rate(result.records_per_second(result.best_reference)),
        f"{result.ratio():.2f}",
        "ok" if result.meets_goal else "MISSED",
    ]


def detail_row(result: Result) -> list[str]:
    dataset = result.dataset
    rates = [_rate(result.records_per_second(name)) for name in ALL_READERS]
    return [
        dataset.name,
        dataset.codec,
        *rates,
        f"{result.ratio(median=True):.2f}",
        f"{result.ratio(OURS_ITER_RECORDS):.2f}",
    ]


def report(results: Sequence[Result], settings: Settings) -> str:
    summary = format_table(
        ["dataset", "codec", "rec/batch", "records", "MB", "ours rec/s", "ours MB/s", "best ref", "ref rec/s", "ratio", "goal"],
        map(summary_row, results),
    )
    detail = format_table(
        ["dataset", "codec", *(f"{name} rec/s" for name in ALL_READERS), "ratio (median)", "iter_records ratio"],
        map(detail_row, results),
    )
    missed = [f"{r.dataset.name}/{r.dataset.codec}" for r in results if not r.meets_goal]
    verdict = "met by every row" if not missed else f"MISSED by {len(missed)} of {len(results)} rows: {', '.join(missed)}"
    return "\n".join(
        [
            f"Best of {settings.rounds} interleaved rounds per reader (after one warm-up call each); "
            "MB = 10^6 bytes as stored (compressed size for compressed codecs).",
            f"ratio = ours rec/s / best reference rec/s, same bytes, same run; {OURS} = iter_batches + iterate each batch.",
            "",
            summary,
            "",
            f"All readers (best-round rec/s), ratio from median rounds, and ratio of {OURS_ITER_RECORDS}:",
            detail,
            "",
            f"goal: ratio >= {GOAL_RATIO:.2f} for every codec -> {verdict}",
        ]
    )


def preamble(settings: Settings) -> str:
    return "\n".join(
        [
            f"decode benchmark ({settings.name}): python {platform.python_version()}, "
            f"aiokafka {version('aiokafka')}, kafka-python {version('kafka-python')}, cramjam {version('cramjam')}",
            f"our decoder implementation (tiered_kafka.format.record_batch.DECODER_IMPLEMENTATION): {DECODER_IMPLEMENTATION}",
            "work per reader: frame batches, validate every batch CRC, skip control batches, read each record's "
            "offset, timestamp, key, value, headers",
            f"generated: {settings.generated_records:,} records of {RECORD_VALUE_SIZE} B values (half random, half text), "
            f"key ~11 B, 2 headers; batch limit on uncompressed bytes: "
            + ", ".join(f"{name} ({size:,} B)" for name, size in BATCH_SIZES.items())
            + " = Java producer / librdkafka default batch.size; one segment per dataset",
        ]
    )


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small data, 3 rounds: a smoke run of a few seconds")
    parser.add_argument("--rounds", type=int, help="timed rounds per dataset (default 7, quick 3)")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    if args.rounds:
        settings = dataclasses.replace(settings, rounds=args.rounds)
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    print(preamble(settings), flush=True)
    try:
        results = [measure(dataset, settings) for dataset in all_datasets(settings)]
    except DecodeMismatch as err:
        print(f"error: decode mismatch, not timing wrong output: {err}", file=sys.stderr)
        return 1
    print()
    print(report(results, settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
