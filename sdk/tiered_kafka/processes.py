"""Moved to ``tiered_kafka_service.processes`` (the services' own package): this name is the same module."""

import sys

from tiered_kafka_service.processes import __name__ as _moved  # noqa: F401 (imports it)

sys.modules[__name__] = sys.modules["tiered_kafka_service.processes"]
