"""Issue 18: the PySpark data source reads every RSM variant offset for offset equal to the fixtures
(the executors fetch through ``remote_read.fetch_range``: compressed chunks are decompressed there)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.rsm.conftest import VARIANTS, RsmBucket, expected_records, rsm_gateway

pytestmark = pytest.mark.integration


def test_spark_reads_each_variant(rsm_bucket: RsmBucket, spark: Any) -> None:
    expected = [(e.offset, e.key, e.value) for e in expected_records()]
    with rsm_gateway(rsm_bucket) as url:
        for topic in sorted(VARIANTS):
            options = {"tiered.gateway.url": url, "tiered.cluster": "rsm", "subscribe": topic}
            rows = spark.read.format("tiered-kafka").options(**options).load().orderBy("offset").collect()
            assert [(r["offset"], r["key"], r["value"]) for r in rows] == expected, topic
