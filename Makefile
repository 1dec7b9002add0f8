# The two commands of the README: `make test` and `make run`. Both install what they need first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?= --durations=25  # the slowest tests, to keep `make test` under its 25-minute budget
# Workers of pytest-xdist: the suite mostly waits on its services (Kafka rolling and deleting, the
# agent's passes, JVM starts), a third of two CPUs busy when run alone; two workers each take whole
# packages (tests/conftest.py: worker_group), so package-scoped stacks still start once per worker.
TEST_WORKERS ?= 2

.PHONY: install test run bench openapi clean

install:
	bash dev/install.sh

# Every test, with the real services started by the fixtures. pytest's exit code 5 (no tests
# collected) is non-zero, so it fails this target and CI.
test: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder $(PYTEST_ARGS)

# The local stack doing its job: Redis, ZooKeeper, SeaweedFS S3, the development Kafka broker, the agent,
# the gateway, the SDK in its four modes and Spark; Ctrl-C stops it.
run: install
	$(PY) -m tiered_kafka_dev.stack

# Benchmarks (not part of `make test`).
bench: install
	$(PY) bench/bench_decode.py
	$(PY) bench/bench_agent.py
	$(PY) bench/bench_gateway.py
	$(PY) bench/bench_sdk.py
	$(PY) bench/bench_bulk.py
	$(PY) bench/bench_txn.py
	$(PY) bench/bench_plans.py
	$(PY) bench/bench_spark.py
	$(PY) bench/bench_spark_pushdown.py
	$(PY) bench/bench_spark_stream.py
	$(PY) bench/bench_gateway_lb.py
	$(PY) bench/bench_registry.py
	$(PY) bench/bench_registry_scale.py
	$(PY) bench/bench_rsm.py
	$(PY) bench/bench_coverage_page.py
	$(PY) bench/bench_iceberg.py
	$(PY) bench/bench_catchup.py
	$(PY) bench/bench_spark_kafka.py
	$(PY) bench/bench_kafka_listener.py

# The gateway's OpenAPI description, openapi/openapi.json, regenerated from the FastAPI app
# (a unit test fails when the checked-in file is stale).
openapi:
	$(PY) -m tiered_kafka_gateway.openapi_spec

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
