"""Data key wrapping (RsaEncryptionProvider: RSA-OAEP, SHA3-512 for OAEP and MGF1) and the per-chunk transforms
(CompressionChunkEnumeration, EncryptionChunkEnumeration: IV || AES-256-GCM ciphertext || tag, with the AAD)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from Crypto.Cipher import PKCS1_OAEP
from Crypto.Hash import SHA1, SHA3_512
from Crypto.PublicKey import RSA
from Crypto.Signature.pss import MGF1

from tiered_kafka.errors import ConfigError, RsmDecryptionError, RsmFormatError
from tiered_kafka.rsm.chunk_index import VariableSizeChunkIndex
from tiered_kafka.rsm.keyring import KeyRing, wrap_data_key
from tiered_kafka.rsm.transform import (
    IV_SIZE,
    TAG_SIZE,
    EncryptionMetadata,
    decrypt_chunk,
    detransform_chunk,
    detransform_range,
    encrypt_chunk,
    transform_chunk,
)


def test_unwrap_matches_bouncycastle_oaep_sha3() -> None:
    # A data key wrapped by BouncyCastle itself ("RSA/NONE/OAEPWithSHA3-512AndMGF1Padding", provider "BC", as
    # RsaEncryptionProvider does; the file's _source says how): catches a wrong OAEP or MGF1 digest, which a
    # vector made with our own pycryptodome cipher could not.
    vector = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "rsm" / "bouncycastle_oaep.json").read_text())
    ring = KeyRing.from_pem({"bc": vector["private_key_pem"]})
    assert ring.unwrap("bc:" + vector["wrapped_data_key"]) == base64.b64decode(vector["data_key"])


def test_our_wrapping_unwraps(key_pair: tuple[bytes, bytes]) -> None:
    private_pem, public_pem = key_pair
    data_key = os.urandom(32)
    assert KeyRing.from_pem({"key-1": private_pem}).unwrap(wrap_data_key("key-1", public_pem, data_key)) == data_key


def test_unwrap_errors(key_pair: tuple[bytes, bytes], other_key_pair: tuple[bytes, bytes]) -> None:
    data_key = os.urandom(32)
    field = wrap_data_key("key-1", key_pair[1], data_key)
    with pytest.raises(RsmDecryptionError, match="key pair 'key-1', which the key ring does not hold .*holds: other"):
        KeyRing.from_pem({"other": other_key_pair[0]}).unwrap(field)
    # The right id with the wrong private key (a rotated or mixed-up key file).
    with pytest.raises(RsmDecryptionError, match="does not unwrap with key pair 'key-1'.*wrong key"):
        KeyRing.from_pem({"key-1": other_key_pair[0]}).unwrap(field)
    # SunJCE's OAEPWithSHA3-512AndMGF1Padding default (MGF1 with SHA-1) does not unwrap as the RSM's.
    sun = PKCS1_OAEP.new(RSA.import_key(key_pair[1]), hashAlgo=SHA3_512, mgfunc=lambda s, n: MGF1(s, n, SHA1))
    with pytest.raises(RsmDecryptionError, match="does not unwrap"):
        KeyRing.from_pem({"key-1": key_pair[0]}).unwrap("key-1:" + base64.b64encode(sun.encrypt(data_key)).decode())
    short = wrap_data_key("key-1", key_pair[1], b"0123456789")  # SegmentManifestV1SerdeTest's 10-byte DATA_KEY
    with pytest.raises(RsmDecryptionError, match="10 bytes, not an AES key"):
        KeyRing.from_pem({"key-1": key_pair[0]}).unwrap(short)


def test_key_ring_config_errors(key_pair: tuple[bytes, bytes]) -> None:
    with pytest.raises(ConfigError, match="not an RSA key in PEM"):
        KeyRing.from_pem({"k": b"-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n"})
    with pytest.raises(ConfigError, match="public key was given"):
        KeyRing.from_pem({"k": key_pair[1]})
    with pytest.raises(ConfigError, match="contain no ':'"):
        KeyRing.from_pem({"a:b": key_pair[0]})
    assert "BEGIN" not in repr(KeyRing.from_pem({"k": key_pair[0]}))


ENCRYPTION = EncryptionMetadata(data_key=bytes(range(32)), aad=b"segment-aad-32-bytes............")


def test_encrypted_chunk_layout() -> None:
    iv = bytes(range(100, 112))
    chunk = encrypt_chunk(b"hello kafka", ENCRYPTION, iv=iv)
    assert chunk[:IV_SIZE] == iv and len(chunk) == IV_SIZE + len(b"hello kafka") + TAG_SIZE
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    assert AESGCM(ENCRYPTION.data_key).decrypt(iv, chunk[IV_SIZE:], ENCRYPTION.aad) == b"hello kafka"
    assert decrypt_chunk(chunk, ENCRYPTION) == b"hello kafka"


@pytest.mark.parametrize("compression", [False, True])
@pytest.mark.parametrize("encrypted", [False, True])
def test_transform_round_trip(compression: bool, encrypted: bool) -> None:
    original = b"record batch bytes " * 200
    encryption = ENCRYPTION if encrypted else None
    stored = transform_chunk(original, compression=compression, encryption=encryption)
    if compression and not encrypted:
        assert stored[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame of its own
    assert detransform_chunk(stored, compression=compression, encryption=encryption, original_size=len(original)) == original


def test_decryption_errors_name_the_chunk() -> None:
    chunk = encrypt_chunk(b"x" * 100, ENCRYPTION)
    wrong = EncryptionMetadata(data_key=bytes(32), aad=ENCRYPTION.aad)
    with pytest.raises(RsmDecryptionError, match="seg.log chunk 3: AES-GCM tag does not verify"):
        decrypt_chunk(chunk, wrong, what="seg.log chunk 3")
    with pytest.raises(RsmDecryptionError, match="tag does not verify"):
        decrypt_chunk(chunk, EncryptionMetadata(ENCRYPTION.data_key, b"other aad"))
    tampered = bytearray(chunk)
    tampered[-1] ^= 1
    with pytest.raises(RsmDecryptionError, match="tag does not verify"):
        decrypt_chunk(bytes(tampered), ENCRYPTION)
    with pytest.raises(RsmDecryptionError, match="tag does not verify"):
        decrypt_chunk(chunk[:-5], ENCRYPTION)
    with pytest.raises(RsmDecryptionError, match="20 bytes cannot hold an AES-GCM chunk.*truncated"):
        decrypt_chunk(chunk[:20], ENCRYPTION)


def test_corrupt_compressed_chunk() -> None:
    with pytest.raises(RsmFormatError, match="chunk 0: not a zstd frame"):
        detransform_chunk(b"plain bytes", compression=True, encryption=None, original_size=11, what="chunk 0")


def test_a_frame_claiming_another_size_is_refused_before_decompressing() -> None:
    # Frame_Header_Descriptor 0xA0: Single_Segment, a 4-byte Frame_Content_Size of 0xFFFFFFFF; then a raw block.
    # Decompressing it would allocate 4 GiB (cramjam aborts the process): refused from the header.
    huge = b"\x28\xb5\x2f\xfd\xa0" + b"\xff\xff\xff\xff" + b"\x01\x00\x00"
    with pytest.raises(RsmFormatError, match="chunk 7: zstd frame claims 4294967295 bytes, the chunk index says 4096"):
        detransform_chunk(huge, compression=True, encryption=None, original_size=4096, what="chunk 7")
    small = transform_chunk(b"y" * 100, compression=True, encryption=ENCRYPTION)
    with pytest.raises(RsmFormatError, match="claims 100 bytes, the chunk index says 200"):
        detransform_chunk(small, compression=True, encryption=ENCRYPTION, original_size=200)
    with pytest.raises(RsmFormatError, match="de-transformed to 100 bytes, the chunk index says 99"):
        detransform_chunk(transform_chunk(b"y" * 100, compression=False, encryption=None), compression=False, encryption=None, original_size=99)


def test_detransform_range_slices_original_bytes() -> None:
    original = os.urandom(1000)
    pieces = [original[i : i + 300] for i in range(0, 1000, 300)]
    stored = [transform_chunk(p, compression=True, encryption=ENCRYPTION) for p in pieces]
    index = VariableSizeChunkIndex(300, 1000, [len(s) for s in stored])
    blob = b"".join(stored)
    for start, end in [(0, 1000), (0, 1), (299, 301), (650, 1000), (900, 950)]:
        chunks = index.chunks_for(start, end)
        data = blob[chunks[0].transformed_position : chunks[-1].transformed_end]
        assert detransform_range(data, chunks, compression=True, encryption=ENCRYPTION, start=start, end=end) == original[start:end]
    chunks = index.chunks_for(0, 1000)
    with pytest.raises(RsmDecryptionError, match="truncated"):
        detransform_range(blob[:-1], chunks, compression=True, encryption=ENCRYPTION, start=0, end=1000)
    with pytest.raises(RsmFormatError, match="too long"):
        detransform_range(blob + b"x", chunks, compression=True, encryption=ENCRYPTION, start=0, end=1000)
