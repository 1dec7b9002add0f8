"""The broker-written segments in tests/fixtures/kafka-segments and their MANIFEST.json."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kafka-segments"
MANIFEST: dict[str, dict[str, dict[str, int]]] = json.loads((FIXTURES / "MANIFEST.json").read_text())


def partitions() -> list[str]:
    return sorted(MANIFEST)


def segment_logs(partition: str) -> list[Path]:
    """The .log files of a fixture partition, oldest first."""
    return [FIXTURES / partition / name for name in sorted(MANIFEST[partition])]
