"""The SDK's gateway client reads only fields the gateway's OpenAPI description requires.

The client parses JSON by hand (the SDK does not depend on the gateway's pydantic models); this
test ties every field it reads to ``openapi/openapi.json``, which another test keeps in step with
the gateway, so a renamed or dropped field fails here instead of in a client in production.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCHEMAS = json.loads((ROOT / "openapi" / "openapi.json").read_text())["components"]["schemas"]

# the response schema each of the client's parsing spots reads (field names come from its source)
READS = {
    "_listing": {"TopicList": ["complete", "next_after"]},
    "_topic_map": {"TopicList": ["topics"], "TopicPartitions": ["name", "partitions"]},
    "partition": {"RemoteExtent": ["earliest_offset", "latest_offset", "segment_count", "total_bytes", "last_stable_offset"], "KafkaExtent": ["log_start_offset", "high_watermark"], "PartitionDetail": ["remote", "kafka", "coverage_start_offset", "gaps"], "GapOut": ["start_offset", "end_offset", "reason"]},
    "plan": {"PlanResponse": ["segment", "ranges", "next_offset", "expires_at_ms", "gap", "last_stable_offset"], "SegmentRef": ["object_key", "base_offset", "last_offset"], "RangeOut": ["start", "end", "first_offset", "last_offset", "url", "range_header", "transformed"], "GapOut": ["start_offset", "end_offset", "reason"]},
    "record_for_timestamp": {"OffsetForTime": ["offset", "record_timestamp"]},
    "_chunked_range": {"ChunkedRange": ["compression", "fetch_start", "fetch_end", "range_header", "chunk_sizes", "original_chunk_sizes", "original_start"]},
}


def _fields_read(method: str) -> set[str]:
    tree = ast.parse((ROOT / "sdk" / "tiered_kafka" / "client" / "gateway.py").read_text())
    function = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == method)
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("_field", "get"):
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                names.add(node.args[1].value)  # _field(body, "name", type)
            elif node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)  # body.get("name")
    return names


def test_every_field_the_client_reads_is_required_by_the_schema() -> None:
    for method, schemas in READS.items():
        listed = {name for names in schemas.values() for name in names}
        assert _fields_read(method) == listed, method
        for schema, names in schemas.items():
            assert set(names) <= set(SCHEMAS[schema]["required"]), f"{schema}: {set(names) - set(SCHEMAS[schema]['required'])}"
