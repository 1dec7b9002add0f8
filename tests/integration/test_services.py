"""The local service launchers run the real programs, answer real clients, and clean up after themselves."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from botocore.exceptions import ClientError
from kazoo.client import KazooClient

import tiered_kafka_dev.services as services
from tiered_kafka_dev.services import (
    LocalService,
    MissingBinaryError,
    RedisServer,
    S3Server,
    ServiceStartError,
    ZooKeeperServer,
)
from tiered_kafka_dev.services._process import pid_alive

pytestmark = pytest.mark.integration

LAUNCHERS = [
    pytest.param(RedisServer, id="redis"),
    pytest.param(ZooKeeperServer, id="zookeeper"),
    pytest.param(S3Server, id="s3"),
]


def port_is_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except OSError:
        return False
    return True


def test_exported_names() -> None:
    assert sorted(services.__all__) == [
        "HAProxyServer",
        "KAFKA_VERSION",
        "KAFKA_ZK_VERSION",
        "KafkaCluster",
        "KafkaServer",
        "LocalService",
        "MissingBinaryError",
        "RedisClusterServer",
        "RedisServer",
        "S3Server",
        "ServiceError",
        "ServiceStartError",
        "SparkStandaloneCluster",
        "ZooKeeperServer",
        "topic_configs",
    ]


# -- Redis --------------------------------------------------------------------------------------------


def test_redis_set_get(redis_server: RedisServer) -> None:
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}/0"
    assert redis_server.host == "127.0.0.1"
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.set("tiered-kafka:test", b"\x00value\xff", ex=60)
        assert client.get("tiered-kafka:test") == b"\x00value\xff"
        assert client.info("server")["process_id"] == redis_server.pid
    finally:
        client.close()


# -- ZooKeeper ----------------------------------------------------------------------------------------


def test_zookeeper_create_get(zookeeper_server: ZooKeeperServer) -> None:
    assert zookeeper_server.hosts == f"127.0.0.1:{zookeeper_server.port}"
    zk = KazooClient(hosts=zookeeper_server.hosts, timeout=10.0)
    zk.start(timeout=15.0)
    try:
        zk.ensure_path("/brokers/ids")
        zk.create("/brokers/ids/0", b'{"host":"127.0.0.1"}', ephemeral=True)
        data, stat = zk.get("/brokers/ids/0")
        assert data == b'{"host":"127.0.0.1"}'
        assert stat.ephemeralOwner == zk.client_id[0]
        assert zk.get_children("/brokers/ids") == ["0"]
    finally:
        zk.stop()
        zk.close()


# -- S3 -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def payload() -> bytes:
    """A few MB of incompressible bytes."""
    return random.Random(20240611).randbytes(5 * 1024 * 1024 + 123)


def test_s3_ranged_get_returns_exact_bytes(s3_server: S3Server, s3_bucket: str, payload: bytes) -> None:
    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key="segments/00000000000000000000.log", Body=payload)

    head = client.head_object(Bucket=s3_bucket, Key="segments/00000000000000000000.log")
    assert head["ContentLength"] == len(payload)
    for first, last in [(0, 0), (0, 16383), (1_000_003, 3_333_337), (len(payload) - 100, len(payload) - 1)]:
        got = client.get_object(
            Bucket=s3_bucket, Key="segments/00000000000000000000.log", Range=f"bytes={first}-{last}"
        )
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["ContentRange"] == f"bytes {first}-{last}/{len(payload)}"
        assert got["Body"].read() == payload[first : last + 1]
    whole = client.get_object(Bucket=s3_bucket, Key="segments/00000000000000000000.log")["Body"].read()
    assert whole == payload


def test_s3_presigned_url_is_verified(s3_server: S3Server, s3_bucket: str, payload: bytes) -> None:
    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key="obj", Body=payload)
    url = client.generate_presigned_url("get_object", Params={"Bucket": s3_bucket, "Key": "obj"}, ExpiresIn=300)
    assert "X-Amz-Signature=" in url and "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url

    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        assert response.read() == payload

    ranged = urllib.request.Request(url, headers={"Range": "bytes=10-19"})
    with urllib.request.urlopen(ranged, timeout=30) as response:
        assert response.status == 206
        assert response.read() == payload[10:20]

    signature = re.search(r"X-Amz-Signature=([0-9a-f]{64})", url)
    assert signature is not None
    start = signature.start(1)
    flipped = "0" if url[start] != "0" else "1"
    tampered = url[:start] + flipped + url[start + 1 :]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(tampered, timeout=30)
    assert refused.value.code == 403


def test_s3_expired_presigned_url_is_refused(s3_server: S3Server, s3_bucket: str) -> None:
    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key="short-lived", Body=b"data")
    url = client.generate_presigned_url("get_object", Params={"Bucket": s3_bucket, "Key": "short-lived"}, ExpiresIn=1)
    time.sleep(2.5)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=30)
    assert refused.value.code == 403


def test_s3_wrong_secret_is_refused(s3_server: S3Server, s3_bucket: str) -> None:
    impostor = S3Server(access_key=s3_server.access_key, secret_key="not-the-secret")
    impostor.port = s3_server.port  # never started: only its client() is used
    with pytest.raises(ClientError) as refused:
        impostor.client().list_objects_v2(Bucket=s3_bucket)
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


def test_s3_bucket_fixture_gives_a_fresh_empty_bucket(s3_server: S3Server, s3_bucket: str) -> None:
    client = s3_server.client()
    assert client.list_objects_v2(Bucket=s3_bucket)["KeyCount"] == 0
    assert s3_bucket in {bucket["Name"] for bucket in client.list_buckets()["Buckets"]}
    assert s3_server.region == "us-east-1"
    assert s3_server.endpoint_url == f"http://127.0.0.1:{s3_server.port}"


# -- lifecycle ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_stop_ends_the_process_and_removes_its_directory(launcher: Callable[[], LocalService]) -> None:
    service = launcher()
    with service:
        pid, workdir, log_path = service.pid, service.workdir, service.log_path
        assert pid is not None and workdir is not None and log_path is not None
        assert service.running and pid_alive(pid)
        assert os.getpgid(pid) == pid  # its own process group, which stop() ends as a whole
        assert workdir.is_dir() and log_path.is_file()
        port = service.port  # type: ignore[attr-defined]
        assert port_is_open(port)
    assert not pid_alive(pid)
    assert not service.running and service.pid is None and service.workdir is None
    assert not workdir.exists()
    assert not port_is_open(port)
    assert not list(Path("/tmp").glob(f"seaweedfs-*-{port}.sock"))
    service.stop()  # idempotent


def fake_program(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake-server"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_a_process_that_exits_during_startup_raises_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work_root = tmp_path / "work"
    work_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(work_root))
    program = fake_program(tmp_path, "echo 'boom: cannot start'; exit 3")
    with pytest.raises(ServiceStartError) as failed:
        RedisServer(executable=program).start()
    err = failed.value
    assert err.service == "Redis"
    assert err.command[0] == str(program)
    assert "exited with code 3" in str(err)
    assert "boom: cannot start" in err.log_tail and "boom: cannot start" in str(err)
    assert str(program) in str(err)
    assert list(work_root.iterdir()) == []  # its directory is removed


def test_a_process_that_never_gets_ready_times_out_and_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    program = fake_program(tmp_path, f"echo $$ > {pid_file}; echo 'still warming up'; exec sleep 600")
    started = time.monotonic()
    with pytest.raises(ServiceStartError) as failed:
        RedisServer(executable=program, startup_timeout_s=1.0).start()
    assert time.monotonic() - started < 10
    assert "not ready within 1 s" in str(failed.value)
    assert "still warming up" in failed.value.log_tail
    assert not pid_alive(int(pid_file.read_text()))


@pytest.mark.parametrize(
    ("make", "missing"),
    [
        pytest.param(lambda p: RedisServer(executable=p / "redis-server"), "redis-server", id="redis"),
        pytest.param(lambda p: ZooKeeperServer(java=p / "java"), "java", id="zookeeper-java"),
        pytest.param(lambda p: ZooKeeperServer(jar_dir=p), "zookeeper.jar", id="zookeeper-jars"),
        pytest.param(lambda p: S3Server(executable=p / "weed"), "weed", id="s3"),
    ],
)
def test_a_missing_binary_says_to_run_install_sh(
    make: Callable[[Path], LocalService], missing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work_root = tmp_path / "work"
    work_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(work_root))
    service = make(tmp_path)
    with pytest.raises(MissingBinaryError) as failed:
        service.start()
    message = str(failed.value)
    assert missing in message and "dev/install.sh" in message and service.name in message
    assert service.pid is None and list(work_root.iterdir()) == []


def test_a_binary_missing_from_path_says_to_run_install_sh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(MissingBinaryError, match=r"weed is not installed .*dev/install\.sh"):
        S3Server().start()


# -- command line -------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_command_line_runs_until_signalled(sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tiered_kafka_dev.services", "redis"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        exports: dict[str, str] = {}
        for line in proc.stdout:
            if line.startswith("export "):
                key, _, value = line.removeprefix("export ").strip().partition("=")
                exports[key] = value
                if key == "TIERED_KAFKA_REDIS_URL":
                    break
        url = exports["TIERED_KAFKA_REDIS_URL"]
        client = redis.Redis.from_url(url)
        assert client.ping()
        redis_pid = client.info("server")["process_id"]
        client.close()

        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        assert not pid_alive(redis_pid)
        assert not port_is_open(urllib.parse.urlsplit(url).port or 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
