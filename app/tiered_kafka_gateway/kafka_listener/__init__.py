"""The gateway's Kafka-protocol listener: any Kafka client reads a cluster's history from S3 (issue 35).

One module per concern: ``codec`` (Kafka's message JSON, interpreted), ``framing`` (frames, headers,
the APIs served), ``settings``, ``upstream`` (the listener's own Kafka connections), ``context``
(one cluster's state), ``metadata``, ``offsets``, ``fetch``, ``groups``, ``sasl``, ``server``
(connections, bounds, metrics) and ``runner`` (the thread ``tiered-kafka-gateway`` starts).
The decisions (groups in Kafka, sessionless Fetch, topic ids) are in docs/design-notes.md.
"""
