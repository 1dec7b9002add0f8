"""Java ``.properties`` files, the configuration format of Kafka and of Pinterest's uploader.

Supported: ``key=value`` and ``key: value`` lines, surrounding whitespace trimmed, ``#`` and ``!``
comment lines, blank lines. Not supported (and refused with an error naming the line): line
continuations and keys with spaces. A later duplicate key wins, as in ``java.util.Properties``.
"""

from __future__ import annotations

import re
from pathlib import Path

from tiered_kafka.errors import ConfigError

_LINE_RE = re.compile(r"^([^=:\s]+)\s*[=:]\s*(.*)$")


def parse_properties(text: str, name: str = "properties") -> dict[str, str]:
    result: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        match = _LINE_RE.match(stripped)
        if match is None or stripped.endswith("\\"):
            raise ConfigError(f"{name}:{number}: expected key=value, got {stripped!r}")
        result[match[1]] = match[2].strip()
    return result


def read_properties(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err}") from err
    return parse_properties(text, str(path))


def parse_bool(raw: object) -> bool | None:
    """A boolean setting as Kafka's ``ConfigDef`` (type BOOLEAN) and Spark's options take it: a bool, or
    the text ``true`` or ``false`` in any case, surrounding spaces ignored. None for anything else:
    the caller raises its own error naming the setting (``ConfigError``, Spark's ``OptionError``)."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    return {"true": True, "false": False}.get(text)
