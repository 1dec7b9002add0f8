# One image for the agent and the gateway:
#   docker build -t tiered-kafka .
#   docker run tiered-kafka tiered-kafka-agent ...     (the broker sidecar)
#   docker run tiered-kafka tiered-kafka-gateway ...   (the REST gateway; the default command)
# Configuration comes from TIERED_KAFKA_AGENT_* / TIERED_KAFKA_GATEWAY_* variables or a mounted file.
#
# The builder stage compiles the C extension (tiered_kafka.format._native) into a wheel; the final
# stage installs that wheel and has no compiler.
FROM python:3.11-slim-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY sdk ./sdk
COPY agent ./agent
COPY app ./app
COPY dev ./dev
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/tiered-kafka

COPY --from=build /wheels /wheels
RUN wheel="$(ls /wheels/tiered_kafka-*.whl)" && pip install "${wheel}[agent,gateway]" && rm -rf /wheels \
    && python -c "from tiered_kafka.format.record_batch import DECODER_IMPLEMENTATION as d; assert d == 'c', d" \
    && useradd --system --uid 10001 tiered
USER tiered

EXPOSE 8080 9400
# Listening beyond loopback, the gateway refuses to start without authentication (auth.enabled with
# auth.tokens, or an explicit auth.allow_anonymous: true): give it a configuration that says which.
CMD ["tiered-kafka-gateway", "--host", "0.0.0.0", "--port", "8080"]
