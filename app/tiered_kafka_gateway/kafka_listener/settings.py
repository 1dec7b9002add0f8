"""``clusters.{name}.kafka_listener``: one cluster's Kafka-protocol listener (``config`` documents the rest).

    port                 (required) the TCP port the listener accepts Kafka clients on
    host                 127.0.0.1    the address it binds; beyond loopback it needs auth.enabled (SASL/PLAIN
                                      with the gateway's tokens) or auth.allow_anonymous (``config.check_exposure``)
    advertised_host      host         the host clients are told to connect to (Metadata, FindCoordinator);
                                      behind a load balancer: the balancer's name (every replica advertises it)
    advertised_port      port
    node_id              1000000      the broker id the listener claims (it leads every partition it serves);
                                      chosen far from Kafka's own broker ids so a client never confuses the two
    mode                 REMOTE_PREFERRED   the consumption mode (``tiered_kafka.modes``) beyond remote storage:
                                      REMOTE_ONLY (the remote end is the log end), REMOTE_PREFERRED, KAFKA_PREFERRED,
                                      KAFKA_ONLY; the modes that read Kafka proxy Fetch to the cluster's
                                      bootstrap_servers
    max_request_bytes    8 MiB        Kafka's socket.request.max.bytes: a larger frame closes the connection
    max_connections      1000         connections at once; one more is closed on accept
    idle_timeout_s       600          Kafka's connections.max.idle.ms: a silent connection is closed
    request_timeout_s    30           a frame started must arrive whole within this (a slow client is closed)
    max_response_bytes   64 MiB       the most one Fetch response carries (KIP-74: at least one batch)
    read_ahead_bytes     8 MiB        one S3 read at a partition's position serves the Fetch requests that follow it
    read_ahead_capacity  256 MiB      the most the listener keeps read ahead, over every partition (``read_ahead``)
    tls_certfile / tls_keyfile        PEM files: the listener speaks TLS (SASL_SSL with auth, SSL without)
    sasl_plain                        always on with auth.enabled: SASL/PLAIN, the password is a gateway token
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tiered_kafka.modes import Mode

MIB = 1024 * 1024


class KafkaListenerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    port: int = Field(ge=0, le=65535)
    host: str = "127.0.0.1"
    advertised_host: str | None = None
    advertised_port: int | None = Field(None, ge=1, le=65535)
    node_id: int = Field(1_000_000, ge=0, le=2**31 - 1)
    mode: Mode = Mode.REMOTE_PREFERRED
    max_request_bytes: int = Field(8 * MIB, ge=1024, le=1 << 30)
    max_connections: int = Field(1000, ge=1)
    idle_timeout_s: float = Field(600.0, gt=0)
    request_timeout_s: float = Field(30.0, gt=0)
    max_response_bytes: int = Field(64 * MIB, ge=1024)
    read_ahead_bytes: int = Field(8 * MIB, ge=0)
    read_ahead_capacity: int = Field(256 * MIB, ge=0)
    tls_certfile: str | None = None
    tls_keyfile: str | None = None

    @model_validator(mode="after")
    def _tls_pair(self) -> KafkaListenerSettings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("kafka_listener: tls_certfile and tls_keyfile go together")
        return self

    def advertised(self, bound_port: int) -> tuple[str, int]:
        """Where clients reach this listener: the advertised host and port, else the bound ones."""
        host = self.advertised_host or ("127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host)
        return host, self.advertised_port or bound_port
