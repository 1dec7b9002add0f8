"""Java .properties parsing shared by the broker's and the agent's configuration."""

from __future__ import annotations

import pytest

from tiered_kafka.errors import ConfigError
from tiered_kafka.properties import parse_properties, read_properties


def test_forms_comments_and_duplicates() -> None:
    text = "# comment\n! also a comment\n\na=1\nb : two words \nc=x=y\na=3\n"
    assert parse_properties(text) == {"a": "3", "b": "two words", "c": "x=y"}


@pytest.mark.parametrize("line", ["novalue", "key with space=1", "continued=1\\"])
def test_unsupported_lines_name_the_line(line: str) -> None:
    with pytest.raises(ConfigError, match="f.properties:2"):
        parse_properties(f"ok=1\n{line}\n", "f.properties")


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        read_properties(tmp_path / "absent.properties")


def test_parse_bool_takes_what_kafka_and_spark_take_and_nothing_else() -> None:
    from tiered_kafka.properties import parse_bool

    assert [parse_bool(v) for v in (True, False, "true", " FALSE ", "True")] == [True, False, True, False, True]
    assert [parse_bool(v) for v in ("yes", "1", "", None, 1)] == [None] * 5
