"""A ``tiered-kafka`` stream into a Parquet file sink, as its own process with its own local[2] driver.

Run by ``test_streaming_live`` (``python stream_process.py SPEC.json``) so that the test can SIGKILL
the whole query (this Python driver, its JVM, its Python workers: one process group) while a
micro-batch is written, then run the same query again from its checkpoint in a new process.

SPEC.json: ``{"options": {...}, "out": DIR, "checkpoint": DIR, "trigger": {"processingTime": "100
milliseconds"} | {"availableNow": true}, "row_delay_s": 0.01}``. ``row_delay_s`` slows each row
down (a Python UDF) so that micro-batches take long enough to be killed in the middle. Exits 0
once an AvailableNow query has finished; a processing-time query runs until killed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    from pyspark.sql.functions import udf

    from tiered_kafka.spark.session import local_session

    spark = local_session("local[2]", "tiered-kafka-stream-process")
    delay = float(spec.get("row_delay_s", 0))

    @udf("long")
    def slow(offset):  # type: ignore[no-untyped-def]  # (no hints: PySpark would read them as a pandas UDF's)
        import time

        time.sleep(delay)
        return offset

    frame = spark.readStream.format("tiered-kafka").options(**spec["options"]).load()
    query = (
        frame.withColumn("offset", slow("offset"))
        .writeStream.format("parquet")
        .option("path", spec["out"])
        .option("checkpointLocation", spec["checkpoint"])
        .trigger(**spec["trigger"])
        .start()
    )
    query.awaitTermination()
    error = query.exception()
    spark.stop()
    if error is not None:
        print(f"stream failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
