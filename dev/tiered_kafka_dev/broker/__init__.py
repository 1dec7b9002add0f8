"""The development Kafka broker: Kafka's wire protocol over Kafka's own log.dir layout.

A test and local-run tool, never a production engine: users run real Apache Kafka (ZooKeeper
or KRaft mode) with the agent beside it. It exists because no package registry reachable here
ships Kafka and Docker does not run, yet the agent, the gateway's Kafka proxy and the SDK's
consumption modes must be tested end to end against real confluent-kafka (librdkafka) clients.

- one broker process per ``Broker``; every partition has one replica, led by this broker
- the log.dir is written by the SDK's format core (``tiered_kafka.format.log_writer``), so its
  segments, indexes and checkpoints are what a Kafka broker writes
- request and response types come from ``kio``; see ``protocol`` for the framing
- optional ZooKeeper registration of the broker, topics and partition states (``zookeeper``)
"""

from tiered_kafka_dev.broker.config import BrokerConfig
from tiered_kafka_dev.broker.server import Broker

__all__ = ["Broker", "BrokerConfig"]
