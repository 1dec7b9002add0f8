"""Shared fixtures of the RSM format tests: the Java test vectors and RSA key pairs (generated once per session)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.rsm_writer import make_rsa_key_pair

VECTORS_PATH = Path(__file__).resolve().parents[2] / "fixtures" / "rsm" / "rsm_test_vectors.json"


@pytest.fixture(scope="session")
def vectors() -> dict[str, Any]:
    """Constants of the RSM's own Java tests (commit 8fb15816), see the file's ``_source``."""
    return json.loads(VECTORS_PATH.read_text())


@pytest.fixture(scope="session")
def key_pair() -> tuple[bytes, bytes]:
    return make_rsa_key_pair()


@pytest.fixture(scope="session")
def other_key_pair() -> tuple[bytes, bytes]:
    return make_rsa_key_pair()
