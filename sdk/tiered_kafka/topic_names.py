"""Kafka's rule for topic names: the one check every boundary imports (issue 36).

Kafka's ``org.apache.kafka.common.internals.Topic.validate``: a name is 1 to
:data:`MAX_NAME_LENGTH` (249) characters of ASCII letters, digits, ``.``, ``_`` and ``-``, and is
neither ``.`` nor ``..`` (they would name the log.dir itself or its parent as a partition's
directory; in a URL path they are dot-segments that a client or a proxy removes, so the request
reaches another resource). A broker refuses such a name with INVALID_TOPIC_EXCEPTION (17).

Used by the gateway's path parameter (``tiered_kafka_gateway.deps``), the registry's keys and the
partition-directory parser (``format.segment_names``), the gateway client's URLs and the Spark
options: a name Kafka forbids is refused where it enters, naming this rule, never looked up.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 249
LEGAL_CHARS = "A-Za-z0-9._-"
TOPIC_NAME_RULE = f"Kafka allows 1-{MAX_NAME_LENGTH} of [{LEGAL_CHARS}], and neither '.' nor '..'"
_LEGAL = re.compile(f"[{LEGAL_CHARS}]{{1,{MAX_NAME_LENGTH}}}")


def is_legal_topic_name(name: object) -> bool:
    """Whether Kafka accepts ``name`` as a topic name (module docstring)."""
    return isinstance(name, str) and name not in (".", "..") and _LEGAL.fullmatch(name) is not None


def topic_name_problem(name: object) -> str | None:
    """None for a legal name; else what is wrong with it, as Kafka's ``Topic.validate`` words it
    (the name itself is quoted, cut at 60 characters: it may be anything a caller sent)."""
    if not isinstance(name, str):
        return f"a topic name must be a string, not {type(name).__name__}"
    shown = repr(name[:60]) + ("..." if len(name) > 60 else "")
    if not name:
        return "a topic name can't be empty"
    if name in (".", ".."):
        return f"topic name {shown} is illegal: it cannot be '.' or '..'"
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name {shown} is illegal: it can't be longer than {MAX_NAME_LENGTH} characters ({len(name)})"
    if _LEGAL.fullmatch(name) is None:
        return f"topic name {shown} is illegal: it contains characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None
