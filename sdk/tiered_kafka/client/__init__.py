"""The SDK's client plumbing: how readers reach the gateway and S3.

- ``gateway``: ``GatewayClient``, the gateway's HTTP API (plans, partitions, offsets), with retries;
- ``plan``: a read plan as clients hold it (``PlannedRange``, ``coalesce_ranges``, ``read_gap``);
- ``http``: the shared HTTP transport (connection pools for the gateway and presigned S3 GETs);
- ``remote_read``: fetching planned ranges and decoding them into records;
- ``columnar_read``: planned ranges decoded straight into Arrow columns.

The contracts these follow live at the package's top level (``read_plan``, ``transactions``,
``read_on``, ``modes``, ``keyspace``); the products built on them are ``consumer``, ``bulk``,
``spark``, ``iceberg`` and ``cli``.
"""
