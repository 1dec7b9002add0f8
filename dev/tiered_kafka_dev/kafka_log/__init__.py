"""Kafka's log.dir layout written without a broker, for tests and benchmarks only.

Segments, indexes, retention and producer state laid out the way a Kafka broker writes them, through
the SDK's format core (``tiered_kafka.format``), when a test needs bytes a broker would not produce
on demand (hand-built transactional histories, a zero timestamp, gigabytes written faster than a
producer can) or a benchmark needs the same segment every run. Anything that needs Kafka's own
behaviour runs Apache Kafka itself (``tiered_kafka_dev.services.KafkaServer``).

- ``log_writer.PartitionLog``: appends batches to a partition directory, rolls, indexes and retains
  like a broker (``LogConfig`` in ``log_config``, under Kafka's topic config names);
- ``log_segment``, ``log_reader``, ``log_recovery``: one segment's files, reads by offset, and the
  recovery of a torn tail on reopen.

It left the SDK in issue 24: no production code writes Kafka's log.
"""
