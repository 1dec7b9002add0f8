"""The stack the SDK tests share: a 2-partition topic whose early segments only remote storage has."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.stack_env import TieredStack, create_tiered_topic, own_tiered_stack

COUNT = 3000
PARTITIONS = 2


@pytest.fixture(scope="package")
def retained(tmp_path_factory: pytest.TempPathFactory, redis_server: Any, s3_server: Any) -> Iterator[tuple[TieredStack, dict[int, int]]]:
    """Topic ``orders``: COUNT records round-robin over PARTITIONS partitions; the broker's
    size-based retention deleted the oldest segments after the agent uploaded them, so the early
    offsets are only remote, the middle in both tiers, and the active segment only in Kafka.
    Yields the stack and each partition's log start.

    One broker, agent and gateway for the package: the tests only read the topic (each with its
    own consumer group), so they share it rather than pay a JVM start and the upload each."""
    with own_tiered_stack(tmp_path_factory.mktemp("sdk-retained"), redis_server, s3_server, "sdk") as stack:
        create_tiered_topic(stack, "orders", PARTITIONS, retention_bytes=250_000)
        stack.produce("orders", COUNT, PARTITIONS)
        stack.wait_uploaded("orders", PARTITIONS)
        yield stack, stack.wait_retention("orders", PARTITIONS)
