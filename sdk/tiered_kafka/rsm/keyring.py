"""The RSM's key ring and its wrapped data keys (Java: ``security.RsaEncryptionProvider``, ``EncryptedDataKey``,
``RsaKeyReader``; ``manifest.serde.DataKeySerializer`` / ``DataKeyDeserializer``).

With ``encryption.enabled``, each segment gets a fresh AES-256 data key and a 32-byte AAD
(``AesEncryptionProvider.createDataKeyAndAAD``: both drawn from the AES key generator). The manifest stores the
data key wrapped by the active key pair's RSA public key::

    "encryption": {"dataKey": "<keyPairId>:<base64(RSA-OAEP(dataKey))>", "aad": "<base64(aad)>"}

* ``EncryptedDataKey.serialize``/``parse``: exactly one ``:``; a non-blank key id; the standard base64 alphabet,
  padded (``java.util.Base64``); a non-empty wrapped key;
* the cipher is ``RSA/NONE/OAEPWithSHA3-512AndMGF1Padding`` from BouncyCastle, whose OAEP uses SHA3-512 for both
  the label hash and MGF1 (unlike the JDK's SunJCE, which defaults MGF1 to SHA-1), with the empty label;
* a key ring maps key pair ids to RSA key pairs (the RSM reads PEM files: ``encryption.key.pairs``,
  ``encryption.key.pairs.<id>.private.key.file``); any id in the ring can unwrap, only the active one wraps.

Python's ``cryptography`` refuses SHA3 digests in OAEP, so the RSA side uses pycryptodome (``Crypto.Cipher.
PKCS1_OAEP`` with ``hashAlgo=SHA3_512`` and ``MGF1(SHA3_512)``); AES-GCM is ``cryptography``'s (transform.py).
Both come with the ``gateway`` extra; they are imported on first use so that the SDK reads unencrypted RSM
segments without them. Key material never appears in messages or reprs.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from tiered_kafka.errors import ConfigError, RsmDecryptionError, RsmFormatError

AES_KEY_SIZES = (16, 24, 32)


def _crypto() -> tuple[Any, Any, Any, Any]:
    try:
        from Crypto.Cipher import PKCS1_OAEP
        from Crypto.Hash import SHA3_512
        from Crypto.PublicKey import RSA
        from Crypto.Signature.pss import MGF1
    except ImportError as exc:  # pragma: no cover - the gateway extra installs it
        raise ImportError(
            "reading encrypted RSM segments needs pycryptodome: pip install 'tiered-kafka[gateway]'"
        ) from exc
    return PKCS1_OAEP, SHA3_512, RSA, MGF1


def _oaep(key: Any) -> Any:
    """``RSA/NONE/OAEPWithSHA3-512AndMGF1Padding`` (BouncyCastle): SHA3-512 for OAEP and for MGF1."""
    pkcs1_oaep, sha3_512, _, mgf1 = _crypto()
    return pkcs1_oaep.new(key, hashAlgo=sha3_512, mgfunc=lambda seed, length: mgf1(seed, length, sha3_512))


def parse_encrypted_data_key(text: object) -> tuple[str, bytes]:
    """``EncryptedDataKey.parse``: ``"keyId:base64"`` to (key id, wrapped key); RsmFormatError if malformed."""
    if not isinstance(text, str):
        raise RsmFormatError(f"encryption.dataKey must be a string, got {type(text).__name__}")
    key_id, colon, encoded = text.partition(":")
    if not colon or ":" in encoded:
        raise RsmFormatError("encryption.dataKey must be '<keyPairId>:<base64>' with exactly one ':'")
    if not key_id.strip():
        raise RsmFormatError("encryption.dataKey has a blank key pair id")
    try:
        wrapped = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise RsmFormatError(f"encryption.dataKey of key pair {key_id!r}: the wrapped key is not base64") from None
    if not wrapped:
        raise RsmFormatError(f"encryption.dataKey of key pair {key_id!r}: the wrapped key is empty")
    return key_id, wrapped


class KeyRing:
    """RSA private keys by key pair id (the RSM's ``encryption.key.pairs``); unwraps manifests' data keys."""

    def __init__(self, keys: Mapping[str, Any]) -> None:
        self._keys = dict(keys)

    @classmethod
    def from_pem(cls, pems: Mapping[str, bytes | str]) -> KeyRing:
        """Private keys in PEM (PKCS#1 ``RSA PRIVATE KEY`` or PKCS#8 ``PRIVATE KEY``) by key pair id."""
        _, _, rsa, _ = _crypto()
        keys: dict[str, Any] = {}
        for key_id, pem in pems.items():
            if not key_id or ":" in key_id:
                raise ConfigError(f"RSM key pair id {key_id!r} must be non-empty and contain no ':'")
            try:
                key = rsa.import_key(pem)
            except (ValueError, IndexError, TypeError):
                raise ConfigError(f"RSM key pair {key_id!r}: not an RSA key in PEM") from None
            if not key.has_private():
                raise ConfigError(f"RSM key pair {key_id!r}: a public key was given, unwrapping needs the private key")
            keys[key_id] = key
        return cls(keys)

    @property
    def key_ids(self) -> list[str]:
        return sorted(self._keys)

    def unwrap(self, data_key_field: str) -> bytes:
        """The manifest's ``encryption.dataKey`` to the AES data key (``RsaEncryptionProvider.decryptDataKey``)."""
        key_id, wrapped = parse_encrypted_data_key(data_key_field)
        key = self._keys.get(key_id)
        if key is None:
            raise RsmDecryptionError(
                f"data key is wrapped by key pair {key_id!r}, which the key ring does not hold "
                f"(it holds: {', '.join(self.key_ids) or 'none'})"
            )
        try:
            data_key = _oaep(key).decrypt(wrapped)
        except (ValueError, TypeError):
            raise RsmDecryptionError(
                f"data key does not unwrap with key pair {key_id!r} (RSA-OAEP SHA3-512): wrong key or corrupt manifest"
            ) from None
        if len(data_key) not in AES_KEY_SIZES:
            raise RsmDecryptionError(f"data key unwrapped by key pair {key_id!r} is {len(data_key)} bytes, not an AES key")
        return bytes(data_key)

    def __repr__(self) -> str:
        return f"KeyRing(key_ids={self.key_ids})"


def wrap_data_key(key_id: str, public_key_pem: bytes | str, data_key: bytes) -> str:
    """``DataKeySerializer``: wrap ``data_key`` with a public key, as ``"keyId:base64"`` (used by test writers)."""
    _, _, rsa, _ = _crypto()
    wrapped = _oaep(rsa.import_key(public_key_pem)).encrypt(data_key)
    return f"{key_id}:{base64.b64encode(wrapped).decode('ascii')}"
