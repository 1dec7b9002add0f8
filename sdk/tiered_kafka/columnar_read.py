"""Moved to ``tiered_kafka.client.columnar_read`` (the client plumbing's package): this name is the same module."""

import sys

from tiered_kafka.client.columnar_read import __name__ as _moved  # noqa: F401 (imports it)

sys.modules[__name__] = sys.modules["tiered_kafka.client.columnar_read"]
