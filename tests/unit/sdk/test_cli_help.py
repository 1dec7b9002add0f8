"""``tiered-kafka --help`` and each subcommand's help say what the command does and show an example;
design notes live in docs/design-notes.md, not in the help."""

from __future__ import annotations

import argparse
import re

import pytest

from tiered_kafka.cli import COMMANDS, _parser

#: words of design prose (the help once carried "decision: a subcommand of its own, not a cat --format ...")
DESIGN_MARKERS = re.compile(r"\b(decision|decided|rationale|design|trade-?off|we chose)\b|``", re.I)


def helps() -> dict[str, str]:
    parser = _parser()
    texts = {"tiered-kafka": parser.format_help()}
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    texts.update({name: sub.format_help() for name, sub in commands.choices.items()})
    return texts


def test_every_subcommand_is_listed_with_an_example() -> None:
    texts = helps()
    assert set(texts) - {"tiered-kafka"} == set(COMMANDS) == {"topics", "describe", "cat", "tail", "export"}
    for name in COMMANDS:
        assert re.search(rf"^example:\n  tiered-kafka {name} \S", texts[name], re.M), texts[name]
    assert re.search(r"^examples:\n(  .*\n)*  tiered-kafka cat ", texts["tiered-kafka"], re.M)


@pytest.mark.parametrize("name", ["tiered-kafka", *COMMANDS])
def test_no_help_text_carries_design_prose(name: str) -> None:
    text = helps()[name]
    assert DESIGN_MARKERS.search(text) is None, text
    assert len(text.splitlines()) < 60  # a page, not an essay


def test_the_token_option_says_it_shows_in_ps_and_where_else_to_put_it() -> None:
    for name in COMMANDS:
        text = " ".join(helps()[name].split())
        assert "--token-file FILE" in text and "visible to every local user in ps" in text and "$TIERED_KAFKA_TOKEN" in text, text
