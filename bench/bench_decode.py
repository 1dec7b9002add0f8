"""Decode benchmark of tiered_kafka.format.record_batch against reference Kafka readers.

Run from the repository root::

    .venv/bin/python bench/bench_decode.py           # full run, about 2 minutes
    .venv/bin/python bench/bench_decode.py --quick   # smoke run, a few seconds

For each dataset (the broker-written fixtures, then generated segments of 1 KiB records in
every codec and two batch sizes) it first checks that all readers decode the same records
and all reject a corrupted CRC, then times them in interleaved rounds and prints our
throughput beside the fastest reference's, measured on the same bytes in the same run.
It reports, it does not assert: the exit status is 0 even when the goal is missed, and
nonzero only on errors (1 when a reader decodes different records, a traceback on a crash).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import platform
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import version

from decode_data import (
    BATCH_SIZES,
    RECORD_VALUE_SIZE,
    Dataset,
    fixture_datasets,
    generate_records,
    generated_datasets,
)
from decode_readers import (
    AIOKAFKA_IMPLEMENTATION,
    ALL_READERS,
    COLUMNAR_C,
    COLUMNAR_PYTHON,
    OURS,
    OURS_ITER_RECORDS,
    RECORD_FIELD_NAMES,
    REFERENCE_READERS,
    Collector,
    read_dataset,
)
from interleaved_timing import Timing, time_interleaved

from tiered_kafka.format.columnar import COLUMNAR_IMPLEMENTATION
from tiered_kafka.format.record_batch import DECODER_IMPLEMENTATION

GOAL_RATIO = 0.90
MB = 1_000_000
#: Byte 61 is the first byte after the magic 2 header: inside the first batch's CRC-covered records.
CORRUPTED_BYTE = 61


@dataclass(frozen=True)
class Settings:
    """How much data and how many rounds."""

    name: str
    generated_records: int
    rounds: int
    min_sample_seconds: float
    first_fixture_segment_only: bool


FULL = Settings("full", generated_records=16 * 1024, rounds=15, min_sample_seconds=0.05,
                first_fixture_segment_only=False)  # fmt: skip
QUICK = Settings("quick", generated_records=512, rounds=3, min_sample_seconds=0.002,
                 first_fixture_segment_only=True)  # fmt: skip


class DecodeMismatch(Exception):
    """A reader decodes a dataset wrongly: its timings would be meaningless."""


@dataclass(frozen=True)
class Result:
    """The timings of every reader on one dataset."""

    dataset: Dataset
    timings: dict[str, Timing]

    def records_per_second(self, reader: str) -> float:
        return self.dataset.records / self.timings[reader].best

    @property
    def best_reference(self) -> str:
        return max(REFERENCE_READERS, key=self.records_per_second)

    def ratio(self, reader: str = OURS) -> float:
        """Best-round throughput of ``reader`` over the best reference's."""
        return self.records_per_second(reader) / self.records_per_second(self.best_reference)

    @property
    def paired_ratio(self) -> float:
        """Median over rounds of (reference time / our time) within the same round: a
        cross-check of ``ratio`` that cancels slow phases of the machine lasting a round."""
        ours = self.timings[OURS].samples
        reference = self.timings[self.best_reference].samples
        return statistics.median(theirs / mine for mine, theirs in zip(ours, reference))

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
        if count != dataset.records:
            raise DecodeMismatch(f"{dataset.label}: {name} read {count} records, expected {dataset.records}")
        decoded[name] = collector.records
    baseline_name = next(iter(REFERENCE_READERS))
    baseline = decoded[baseline_name]
    for name, records in decoded.items():
        if records != baseline:
            index = next(i for i, (mine, theirs) in enumerate(zip(records, baseline)) if mine != theirs)
            differences = "; ".join(
                f"{field}: {name} {mine!r:.80} vs {baseline_name} {theirs!r:.80}"
                for field, mine, theirs in zip(RECORD_FIELD_NAMES, records[index], baseline[index])
                if mine != theirs
            )
            raise DecodeMismatch(f"{dataset.label}: record #{index} differs: {differences}")


def verify_crc_detection(dataset: Dataset) -> None:
    """Every reader must reject the first segment with one byte of its first batch's records
    flipped: proof that each reader really pays for CRC validation."""
    corrupted = bytearray(dataset.segments[0])
    corrupted[CORRUPTED_BYTE] ^= 0xFF
    for name, reader in ALL_READERS.items():
        try:
            read_dataset(reader, [bytes(corrupted)])
        except Exception as err:  # noqa: BLE001 - each reader has its own CRC error type
            if "crc" not in str(err).lower():
                raise DecodeMismatch(f"{dataset.label}: {name} failed without a CRC error: {err!r}") from err
        else:
            raise DecodeMismatch(f"{dataset.label}: {name} accepted a corrupted CRC")


# -- measuring --------------------------------------------------------------------------------


def measure(dataset: Dataset, settings: Settings) -> Result:
    """Check, then time every reader on ``dataset``; log progress to stderr."""
    started = time.perf_counter()
    verify(dataset)
    verify_crc_detection(dataset)
    segments = dataset.segments
    candidates = {name: functools.partial(read_dataset, reader, segments) for name, reader in ALL_READERS.items()}
    timings = time_interleaved(candidates, rounds=settings.rounds, min_sample_seconds=settings.min_sample_seconds)
    result = Result(dataset, timings)
    elapsed = time.perf_counter() - started
    print(f"  {dataset.label:<26} ratio {_ratio(result.ratio())}  ({elapsed:.1f}s)", file=sys.stderr, flush=True)
    return result


def all_datasets(settings: Settings) -> Iterable[Dataset]:
    """The fixtures, then the generated datasets (built one at a time)."""
    yield from fixture_datasets(first_segment_only=settings.first_fixture_segment_only)
    yield from generated_datasets(generate_records(settings.generated_records))


# -- reporting --------------------------------------------------------------------------------


def format_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A plain-text table; the first two columns (dataset, codec) left-aligned, the rest right."""
    table = [list(header), *map(list, rows)]
    widths = [max(len(row[column]) for row in table) for column in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        aligned = (cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(cells, widths)))
        return "  ".join(aligned).rstrip()

    return "\n".join([line(table[0]), line(["-" * width for width in widths]), *map(line, table[1:])])


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _ratio(value: float) -> str:
    """Three decimals, rounded down, so that a ratio printed as 0.900 does meet a 0.90 goal."""
    return f"{math.floor(value * 1000) / 1000:.3f}"


SUMMARY_HEADER = ("dataset", "codec", "rec/batch", "records", "MB", "ours rec/s", "ours MB/s", "best ref",
                  "ref rec/s", "ratio", "goal")  # fmt: skip


def summary_row(result: Result) -> list[str]:
    dataset = result.dataset
    return [
        dataset.name,
        dataset.codec,
        f"{dataset.records / dataset.batches:.0f}",
        f"{dataset.records:,}",
        f"{dataset.size / MB:.1f}",
        _rate(result.records_per_second(OURS)),
        f"{dataset.size / MB / result.timings[OURS].best:.0f}",
        result.best_reference,
        _rate(result.records_per_second(result.best_reference)),
        _ratio(result.ratio()),
        "ok" if result.meets_goal else "MISSED",
    ]


DETAIL_HEADER = ("dataset", "codec", *(f"{name} rec/s" for name in ALL_READERS), "paired ratio", "iter_records ratio")


def detail_row(result: Result) -> list[str]:
    return [
        result.dataset.name,
        result.dataset.codec,
        *(_rate(result.records_per_second(name)) for name in ALL_READERS),
        f"{result.paired_ratio:.2f}",
        f"{result.ratio(OURS_ITER_RECORDS):.2f}",
    ]


COLUMNAR_HEADER = ("dataset", "codec", "c rec/s", "c MB/s", "c/aiokafka", "python rec/s", "python MB/s",
                   "python/aiokafka")  # fmt: skip


def columnar_row(result: Result) -> list[str]:
    """decode_columnar's throughput, C and reference, each over aiokafka's reader in the same run."""
    dataset = result.dataset
    aiokafka = result.records_per_second("aiokafka")
    cells = [dataset.name, dataset.codec]
    for name in (COLUMNAR_C, COLUMNAR_PYTHON):
        rate = result.records_per_second(name)
        cells += [_rate(rate), f"{dataset.size / MB / result.timings[name].best:.0f}", _ratio(rate / aiokafka)]
    return cells


def goal_line(results: Sequence[Result]) -> str:
    missed = [result.dataset.label for result in results if not result.meets_goal]
    verdict = f"MISSED by {len(missed)} of {len(results)} rows: {', '.join(missed)}" if missed else "met by every row"
    return f"goal: ratio >= {GOAL_RATIO:.2f} for every codec -> {verdict}"


def report(results: Sequence[Result], settings: Settings) -> str:
    return "\n".join(
        [
            f"Best of {settings.rounds} interleaved rounds per reader, after one warm-up call each. "
            "MB = 10^6 bytes as stored (compressed size for compressed codecs).",
            f"ratio = {OURS} rec/s / best reference rec/s, same bytes, same run; "
            f"{OURS} = iter_batches + iterate each non-control batch.",
            "",
            format_table(SUMMARY_HEADER, map(summary_row, results)),
            "",
            "All readers (best-round rec/s); paired ratio = median over rounds of the in-round ratio "
            f"{OURS}/best ref; iter_records ratio = {OURS_ITER_RECORDS} (best round) / best ref:",
            format_table(DETAIL_HEADER, map(detail_row, results)),
            "",
            "Columnar decoder (tiered_kafka.format.columnar.decode_columnar: the segment into Arrow arrays, "
            "no Python object per record), C and pure-Python reference; ratio over aiokafka's reader rec/s:",
            format_table(COLUMNAR_HEADER, map(columnar_row, results)),
            "",
            goal_line(results),
        ]
    )


def preamble(settings: Settings) -> str:
    batch_sizes = ", ".join(f"{name} ({size:,} B)" for name, size in BATCH_SIZES.items())
    return "\n".join(
        [
            f"decode benchmark ({settings.name}): python {platform.python_version()}, aiokafka {version('aiokafka')}, "
            f"kafka-python {version('kafka-python')}, cramjam {version('cramjam')}",
            "our decoder implementation (tiered_kafka.format.record_batch.DECODER_IMPLEMENTATION): "
            f"{DECODER_IMPLEMENTATION}; columnar: {COLUMNAR_IMPLEMENTATION}; aiokafka reference reader: "
            f"{AIOKAFKA_IMPLEMENTATION}",
            "work per reader and segment: frame batches, validate every batch's CRC, skip control batches, "
            "read each record's offset, timestamp, key, value and headers",
            f"generated: {settings.generated_records:,} records per dataset, {RECORD_VALUE_SIZE} B values "
            "(half random, half text), ~11 B keys, 2 headers, one segment per dataset;",
            f"  batch limit on uncompressed bytes: {batch_sizes} = Java producer / librdkafka default batch.size",
        ]
    )


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="little data, 3 rounds: a smoke run of a few seconds")
    parser.add_argument("--rounds", type=int, help=f"timed rounds per dataset ({FULL.rounds}, quick {QUICK.rounds})")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    return dataclasses.replace(settings, rounds=args.rounds) if args.rounds else settings


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
