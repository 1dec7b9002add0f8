"""Real local services for tests and local runs: Apache Kafka (from Maven Central), Redis, ZooKeeper and
an S3 endpoint (SeaweedFS).

:class:`RedisClusterServer` runs a Redis Cluster (three masters, one replica each) from the same binaries.

Each launcher starts its service as a child process on free 127.0.0.1 ports, in a temporary directory of
its own, waits until it answers, and on stop ends exactly the process it started and removes the directory::

    with RedisServer() as redis_server, S3Server() as s3:
        ...  # redis_server.url, s3.endpoint_url, s3.client()

The programs come from ``dev/install.sh``; a missing one raises :class:`MissingBinaryError`.
``python -m tiered_kafka_dev.services`` runs them until Ctrl-C, and :mod:`.pytest_plugin` has fixtures.
"""

from ._haproxy import HAProxyServer
from ._kafka import KAFKA_VERSION, KAFKA_ZK_VERSION, KafkaCluster, KafkaServer, topic_configs
from ._process import LocalService, MissingBinaryError, ServiceError, ServiceStartError
from ._redis import RedisServer
from ._redis_cluster import RedisClusterServer
from ._s3 import S3Server
from ._spark import SparkStandaloneCluster
from ._zookeeper import ZooKeeperServer

__all__ = [
    "HAProxyServer",
    "KAFKA_VERSION",
    "KAFKA_ZK_VERSION",
    "KafkaCluster",
    "KafkaServer",
    "LocalService",
    "MissingBinaryError",
    "RedisClusterServer",
    "RedisServer",
    "S3Server",
    "ServiceError",
    "ServiceStartError",
    "SparkStandaloneCluster",
    "ZooKeeperServer",
    "topic_configs",
]
