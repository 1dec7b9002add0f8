"""tiered-kafka agent: the sidecar beside each broker that uploads rotated segments to S3.

It is built on the SDK's shared core (``tiered_kafka.format``, ``tiered_kafka.keyspace``).
The uploader itself is tracked in its own issue; this package is the place it lives.
"""
