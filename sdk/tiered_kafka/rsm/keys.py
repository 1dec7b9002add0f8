"""Object keys of the RSM's segment objects (Java: ``io.aiven.kafka.tieredstorage.ObjectKeyFactory``).

``ObjectKeyFactory.key`` builds ``$(prefix)$(main_path).$(suffix)`` where ``mainPath`` is::

    {topic}-{topicId}/{partition}/{startOffset}-{segmentId}

* ``prefix`` is the RSM's ``key.prefix`` setting, used verbatim (it normally ends in ``/``; it may be empty);
* ``topicId`` and ``segmentId`` are Kafka ``Uuid``\\ s in their text form: the 16 bytes (most significant long
  first) in unpadded base64url, always 22 characters of ``[A-Za-z0-9_-]``. Both may contain ``-``, so a key is
  parsed from the right (the topic name, which may contain ``-`` too, is whatever is left);
* ``startOffset`` is zero-padded to 20 digits (``filenamePrefixFromOffset``, as Kafka's log file names);
* ``suffix`` is ``log``, ``indexes`` or ``rsm-manifest`` (``ObjectKeyFactory.Suffix``).

Example: ``someprefix/topic-MWJ6FHTfRYy67jzwZdeqSQ/7/00000000000000001234-tqimKeZwStOEOwRzT3L5oQ.log``.

Not covered: the RSM can be configured (``custom.metadata.fields.include``) to store ``OBJECT_PREFIX`` and
``OBJECT_KEY`` in the segment's custom metadata, which then override the prefix and main path per segment;
keys here always follow the configured prefix and the layout above.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from tiered_kafka.errors import RsmFormatError

#: ``ObjectKeyFactory.Suffix`` values, in the order copyLogSegmentData uploads the objects.
SUFFIXES: tuple[str, ...] = ("log", "indexes", "rsm-manifest")

UUID_TEXT_LENGTH = 22
_UUID_RE = re.compile(r"[A-Za-z0-9_-]{22}")
_OFFSET_DIGITS = 20


def uuid_to_bytes(text: str, *, what: str = "Uuid") -> bytes:
    """Kafka ``Uuid.fromString``: 22 base64url characters to the 16 wire bytes; RsmFormatError otherwise."""
    if not isinstance(text, str) or not _UUID_RE.fullmatch(text):
        raise RsmFormatError(f"{what} {text!r} is not a Kafka Uuid (22 base64url characters)")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError) as exc:  # pragma: no cover - the regex admits only valid characters
        raise RsmFormatError(f"{what} {text!r} is not a Kafka Uuid: {exc}") from None
    if len(raw) != 16 or uuid_from_bytes(raw) != text:
        raise RsmFormatError(f"{what} {text!r} is not a Kafka Uuid (its last character must encode 2 bits)")
    return raw


def uuid_from_bytes(raw: bytes) -> str:
    """Kafka ``Uuid.toString``: 16 bytes (most significant long first) as unpadded base64url."""
    if len(raw) != 16:
        raise RsmFormatError(f"a Kafka Uuid is 16 bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


@dataclass(frozen=True)
class RsmSegmentKey:
    """One remote log segment's place in the bucket: everything ``ObjectKeyFactory.mainPath`` uses."""

    prefix: str
    topic: str
    topic_id: str
    partition: int
    start_offset: int
    segment_id: str

    def __post_init__(self) -> None:
        if not self.topic or "/" in self.topic:
            raise RsmFormatError(f"topic name {self.topic!r} cannot appear in an RSM key")
        uuid_to_bytes(self.topic_id, what="topic id")
        uuid_to_bytes(self.segment_id, what="segment id")
        if self.partition < 0:
            raise RsmFormatError(f"partition {self.partition} is negative")
        if not 0 <= self.start_offset < 10**_OFFSET_DIGITS:
            raise RsmFormatError(f"start offset {self.start_offset} does not fit the key's 20 digits")

    @property
    def partition_prefix(self) -> str:
        """``{prefix}{topic}-{topicId}/{partition}/``: the listing prefix of the partition's segments."""
        return f"{self.prefix}{self.topic}-{self.topic_id}/{self.partition}/"

    @property
    def main_path(self) -> str:
        """``ObjectKeyFactory.mainPath``: ``{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}``."""
        return f"{self.topic}-{self.topic_id}/{self.partition}/{self.start_offset:020d}-{self.segment_id}"

    def object_key(self, suffix: str) -> str:
        """The key of the segment's ``.log``, ``.indexes`` or ``.rsm-manifest`` object."""
        if suffix not in SUFFIXES:
            raise ValueError(f"suffix must be one of {', '.join(SUFFIXES)}, got {suffix!r}")
        return f"{self.prefix}{self.main_path}.{suffix}"


def segment_key(
    *, prefix: str, topic: str, topic_id: str, partition: int, start_offset: int, segment_id: str, suffix: str
) -> str:
    """The object key for one segment object (``ObjectKeyFactory.key``), in one call."""
    return RsmSegmentKey(prefix, topic, topic_id, partition, start_offset, segment_id).object_key(suffix)


def parse_key(key: str, prefix: str) -> tuple[RsmSegmentKey, str]:
    """Split an object key into its :class:`RsmSegmentKey` and suffix, from the right.

    Raises RsmFormatError naming the key when it does not start with ``prefix`` or does not follow the layout.
    """

    def bad(reason: str) -> RsmFormatError:
        return RsmFormatError(f"object key {key!r} is not an RSM segment key (prefix {prefix!r}): {reason}")

    if not key.startswith(prefix):
        raise bad("it does not start with the prefix")
    rest = key[len(prefix):]
    for suffix in SUFFIXES:
        if rest.endswith("." + suffix):
            main = rest[: -len(suffix) - 1]
            break
    else:
        raise bad(f"the suffix is none of .{', .'.join(SUFFIXES)}")
    parts = main.rsplit("/", 2)
    if len(parts) != 3:
        raise bad("expected {topic}-{topicId}/{partition}/{startOffset}-{segmentId}")
    topic_dir, partition_text, file_name = parts
    if not partition_text.isdigit() or not partition_text.isascii() or (len(partition_text) > 1 and partition_text[0] == "0"):
        raise bad(f"partition {partition_text!r} is not a decimal number")
    if len(file_name) != _OFFSET_DIGITS + 1 + UUID_TEXT_LENGTH or file_name[_OFFSET_DIGITS] != "-":
        raise bad(f"file name {file_name!r} is not {{startOffset:020d}}-{{segmentId}}")
    offset_text, segment_id = file_name[:_OFFSET_DIGITS], file_name[_OFFSET_DIGITS + 1:]
    if not offset_text.isdigit() or not offset_text.isascii():
        raise bad(f"start offset {offset_text!r} is not 20 digits")
    if len(topic_dir) < UUID_TEXT_LENGTH + 2 or topic_dir[-UUID_TEXT_LENGTH - 1] != "-":
        raise bad(f"directory {topic_dir!r} is not {{topic}}-{{topicId}}")
    topic, topic_id = topic_dir[: -UUID_TEXT_LENGTH - 1], topic_dir[-UUID_TEXT_LENGTH:]
    try:
        segment = RsmSegmentKey(prefix, topic, topic_id, int(partition_text), int(offset_text), segment_id)
    except RsmFormatError as exc:
        raise bad(str(exc)) from None
    return segment, suffix
