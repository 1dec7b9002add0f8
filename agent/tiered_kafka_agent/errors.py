"""The agent's exception bases. The whole tree, the agent's classes included, is drawn in
``tiered_kafka.errors``; each class lives beside the code that raises it."""

from __future__ import annotations

from tiered_kafka.errors import TieredKafkaError


class AgentError(TieredKafkaError):
    """The agent's own work failed: its leadership view, a broker's local segment, an S3 object, the audit."""


class LocalSegmentError(AgentError):
    """A broker's local segment cannot be read as the upload needs it (gone, not ready yet, no tail).
    The uploader's next pass looks again: not ``retriable`` by ``tiered_kafka.retry``."""


class RemoteObjectError(AgentError):
    """An object in S3 is not what the upload expects: malformed metadata, or another leader's
    bytes (or upload in flight) at this segment's key."""
