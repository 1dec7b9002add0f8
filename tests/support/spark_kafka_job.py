"""Spark's own Kafka source (``format("kafka")``, spark-sql-kafka of PySpark's version) reading a topic, as a
process of its own (``python -m tests.support.spark_kafka_job BOOTSTRAP TOPIC OUT``): the suite's shared
SparkSession has no Kafka jars, and jars cannot be added to a running driver.

Writes to OUT (a directory):
- ``batch.jsonl``: a batch read, ``startingOffsets`` earliest to ``endingOffsets`` latest;
- ``stream/``: the JSON file sink of a ``readStream`` (``maxOffsetsPerTrigger`` 500) stopped after its
  first micro-batch and started again from its checkpoint with ``availableNow``: exactly once, the
  file sink's own log says which files count (read back by ``read_stream_output``).
Each row: partition, offset, key and value (base64), timestamp (ms), headers ([key, base64 value]).
"""

from __future__ import annotations

import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

COLUMNS = ["partition", "offset", "key", "value", "CAST(unix_millis(timestamp) AS LONG) AS ts", "headers"]


def jars() -> str:
    import pyspark

    from tiered_kafka_dev.services._kafka import java_cache_dir

    directory = java_cache_dir() / f"spark-sql-kafka-{pyspark.__version__}"
    found = sorted(directory.glob("*.jar")) if (directory / ".complete").is_file() else []
    if not found:
        raise SystemExit(f"Spark's Kafka source is not in {directory}: run `bash dev/install.sh`")
    return ",".join(str(j) for j in found)


def row_json(row: Any) -> str:
    b64 = lambda v: None if v is None else base64.b64encode(bytes(v)).decode()  # noqa: E731
    headers = [[h["key"], b64(h["value"])] for h in (row["headers"] or [])]
    return json.dumps({"partition": row["partition"], "offset": row["offset"], "key": b64(row["key"]), "value": b64(row["value"]),
                       "ts": row["ts"], "headers": headers})


def main(bootstrap: str, topic: str, out: Path) -> None:
    from tiered_kafka.spark.session import local_session

    spark = local_session("local[2]", "listener-spark-kafka", **{"spark.jars": jars()})
    try:
        options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "includeHeaders": "true"}
        batch = spark.read.format("kafka").options(**options, startingOffsets="earliest", endingOffsets="latest").load()
        rows = batch.selectExpr(*COLUMNS).collect()
        (out / "batch.jsonl").write_text("".join(row_json(r) + "\n" for r in rows))

        def start(trigger: dict[str, Any]) -> Any:
            stream = spark.readStream.format("kafka").options(**options, startingOffsets="earliest", maxOffsetsPerTrigger="500").load()
            writer = stream.selectExpr(*COLUMNS).writeStream.format("json").option("path", str(out / "stream")).option(
                "checkpointLocation", str(out / "checkpoint"))
            return writer.trigger(**trigger).start()

        first = start({"processingTime": "1 second"})
        deadline = time.monotonic() + 120
        while not (first.recentProgress and any(p["numInputRows"] > 0 for p in first.recentProgress)):
            if time.monotonic() > deadline or first.exception() is not None:
                raise SystemExit(f"no micro-batch: {first.exception()}")
            time.sleep(0.2)
        first.stop()
        done = [p for p in first.recentProgress if p["numInputRows"] > 0]
        (out / "first_run_rows").write_text(str(sum(p["numInputRows"] for p in done)))
        again = start({"availableNow": True})  # from the checkpoint: the rest, nothing twice
        again.awaitTermination(300)
        if again.exception() is not None:
            raise SystemExit(str(again.exception()))
        rows = spark.read.json(str(out / "stream")).collect()  # the file sink's log: committed files only
        (out / "stream.jsonl").write_text("".join(json.dumps(r.asDict(recursive=True)) + "\n" for r in rows))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
