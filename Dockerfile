# One image for the agent and the gateway:
#   docker build -t tiered-kafka .
#   docker run tiered-kafka tiered-kafka-agent ...     (the broker sidecar)
#   docker run tiered-kafka tiered-kafka-gateway ...   (the REST gateway; the default command)
# Configuration comes from TIERED_KAFKA_AGENT_* / TIERED_KAFKA_GATEWAY_* variables or a mounted file.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/tiered-kafka

COPY pyproject.toml README.md ./
COPY sdk ./sdk
COPY agent ./agent
COPY app ./app
COPY dev ./dev
RUN pip install ".[agent,gateway]" && useradd --system --uid 10001 tiered
USER tiered

EXPOSE 8080 9400
CMD ["tiered-kafka-gateway", "--host", "0.0.0.0", "--port", "8080"]
