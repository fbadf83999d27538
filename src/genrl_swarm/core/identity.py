"""A peer's identity: one Ed25519 key, and a peer id derived from its public key.

The peer id is written the way libp2p writes it ("12D3KooW..."): base58 of the identity
multihash of the protobuf-encoded public key. So anyone can check a signature from the id alone,
no key registry needed, and on HiveMind the libp2p identity *is* the swarm identity (p2pd reads
the same key file and derives the same id). Forging another peer's id means forging its signature.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
#: protobuf PublicKey{Type: Ed25519 (1), Data: 32 bytes}, inside an identity multihash (0x00, len 36).
_PUBLIC_PREFIX = bytes([0x00, 0x24, 0x08, 0x01, 0x12, 0x20])
#: protobuf PrivateKey{Type: Ed25519 (1), Data: 64 bytes (seed || public)}: the file p2pd's -id reads.
_PRIVATE_PREFIX = bytes([0x08, 0x01, 0x12, 0x40])
SIGNATURE_BYTES = 64


class IdentityError(ValueError):
    """An identity file that is not an Ed25519 key this library (or p2pd) wrote."""


def b58encode(data: bytes) -> str:
    number, text = int.from_bytes(data, "big"), ""
    while number:
        number, digit = divmod(number, 58)
        text = _ALPHABET[digit] + text
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + text


def b58decode(text: str, max_chars: int = 64) -> bytes:
    """Base58 to bytes; ValueError on another alphabet. Bounded: ids are short, and big-int
    conversion of attacker-chosen text must stay cheap."""
    if len(text) > max_chars:
        raise ValueError(f"base58 text of {len(text)} chars (at most {max_chars})")
    number = 0
    for c in text:
        if c not in _INDEX:
            raise ValueError(f"{c!r} is not base58")
        number = number * 58 + _INDEX[c]
    body = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return b"\0" * (len(text) - len(text.lstrip("1"))) + body


def peer_id_of(public_key: bytes) -> str:
    if len(public_key) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return b58encode(_PUBLIC_PREFIX + public_key)


def public_key_of(peer_id: str) -> bytes | None:
    """The Ed25519 key a peer id embeds, or None for an id that embeds none."""
    try:
        raw = b58decode(peer_id)
    except ValueError:
        return None
    if len(raw) != len(_PUBLIC_PREFIX) + 32 or not raw.startswith(_PUBLIC_PREFIX):
        return None
    return raw[len(_PUBLIC_PREFIX) :]


def verify(peer_id: str, message: bytes, signature: bytes) -> bool:
    """True when ``signature`` over ``message`` was made with the key ``peer_id`` names."""
    return verify_key(public_key_of(peer_id), message, signature)


def verify_key(key: bytes | None, message: bytes, signature: bytes) -> bool:
    """True when ``signature`` over ``message`` was made with the Ed25519 public ``key``."""
    if key is None or len(key) != 32 or not isinstance(signature, bytes) or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(signature, message)
    except InvalidSignature:
        return False
    return True


class Identity:
    """One peer's signing key. ``peer_id`` is what every other peer knows it by."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public_key = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.peer_id = peer_id_of(self.public_key)

    @classmethod
    def generate(cls) -> Identity:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> Identity:
        """A deterministic identity (tests, in-process swarms that must keep ids across a resume)."""
        if len(seed) != 32:
            raise ValueError("an Ed25519 seed is 32 bytes")
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    def _seed(self) -> bytes:
        return self._key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())

    def to_bytes(self) -> bytes:
        """The libp2p protobuf form (what p2pd's ``-id`` file holds)."""
        return _PRIVATE_PREFIX + self._seed() + self.public_key

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "identity") -> Identity:
        if len(data) != len(_PRIVATE_PREFIX) + 64 or not data.startswith(_PRIVATE_PREFIX):
            raise IdentityError(
                f"{where} is not an Ed25519 identity ({len(data)} bytes; expected {len(_PRIVATE_PREFIX) + 64} "
                f"starting with {_PRIVATE_PREFIX.hex()}): point to the file this peer wrote, or to a new path"
            )
        seed, public = data[len(_PRIVATE_PREFIX) : -32], data[-32:]
        identity = cls.from_seed(seed)
        if identity.public_key != public:
            raise IdentityError(f"{where} is corrupt: its public half does not match its private half")
        return identity

    @classmethod
    def load_or_create(cls, path: str | Path) -> Identity:
        """The key in ``path``, or a new one written there (owner-read-only)."""
        path = Path(path).expanduser()
        if path.exists():
            try:
                data = path.read_bytes()
            except OSError as e:
                raise IdentityError(f"cannot read identity file {path}: {e.strerror}") from e
            return cls.from_bytes(data, f"identity file {path}")
        identity = cls.generate()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(identity.to_bytes())
        return identity
