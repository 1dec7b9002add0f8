"""The SDK's consumer: ``TieredConsumer``, a drop-in for ``confluent_kafka.Consumer`` that also
reads remote storage through the gateway (``tiered_kafka.consumer.consumer`` explains how)."""

from tiered_kafka.consumer.consumer import TieredConsumer
from tiered_kafka.modes import Mode

__all__ = ["Mode", "TieredConsumer"]
