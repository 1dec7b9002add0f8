# One image for the agent and the gateway:
#   docker build -t tiered-kafka .
#   docker run tiered-kafka tiered-kafka-agent ...     (the broker sidecar)
#   docker run tiered-kafka tiered-kafka-gateway ...   (the REST gateway)
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

CMD ["python", "-c", "import tiered_kafka; print('tiered-kafka', tiered_kafka.__version__, '- run tiered-kafka-agent or tiered-kafka-gateway')"]
