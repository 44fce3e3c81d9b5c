"""``FrameCipher``: the Fernet tokens pysyncobj encrypts every Raft frame with, made and
read with a third of the calls.

pysyncobj (0.3.17) encrypts each frame it sends with ``cryptography``'s ``Fernet`` and, for
each frame it receives, calls ``extract_timestamp`` and then ``decrypt``: both decode the
token's base64 and check its HMAC, so every frame was verified twice, and each call builds
its padder, HMAC and cipher objects anew. A single-message produce crosses the leader's
transport four times (an AppendEntries to each follower, each answer) and each follower's
twice, and Fernet was 15-21% of the brokers' Raft-thread time (ARCHITECTURE.md,
"Performance", issue 24).

The tokens are the same bytes: version 0x80, the 8-byte big-endian timestamp, a random IV,
AES-128-CBC with PKCS7 padding, HMAC-SHA256 over all of it, url-safe base64 (the Fernet
specification), under the same key, derived from the cluster secret as pysyncobj derives it
(PBKDF2-HMAC-SHA256, its salt, 100,000 iterations). So a node with this cipher and one with
pysyncobj's own talk to each other (no new obstacle to a rolling upgrade), and a frame is
authenticated before a byte of it is decrypted or unpickled, as before. What changed: the
HMAC is the standard library's one-shot ``hmac.digest``, the padding is done in place, and a
token that ``extract_timestamp`` verified is not verified again by the ``decrypt`` that
follows it.

Threads: one cipher per node, used by the node's tick thread only (pysyncobj's transport);
the remembered token is one tuple, replaced whole, so another thread could at worst verify
again.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pysyncobj.syncobj
from cryptography.fernet import InvalidToken
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

_VERSION = 0x80
_IV_BYTES = 16
_MAC_BYTES = 32
_BLOCK_BYTES = 16
_HEADER_BYTES = 1 + 8 + _IV_BYTES
"""Version, timestamp, IV: what precedes the ciphertext."""
_PYSYNCOBJ_SALT = b"\x15%q\xe6\xbb\x02\xa6\xf8\x13q\x90\xcf6+\x1e\xeb"
"""``pysyncobj.encryptor.SALT``: the same key from the same secret as its own nodes."""
_PBKDF2_ITERATIONS = 100_000
_NOTHING_VERIFIED: tuple[object, bytes] = (object(), b"")
"""No token: an object no token is (``b""`` would be: the empty bytes object is shared)."""


class FrameCipher:
    """Fernet tokens under one 32-byte key (signing key, then encryption key)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("a Fernet key is 32 bytes")
        self._signing_key = key[:16]
        self._aes = algorithms.AES(key[16:])
        self._verified: tuple[object, bytes] = _NOTHING_VERIFIED
        """The token ``extract_timestamp`` verified last, and its decoded bytes, until the
        ``decrypt`` that follows takes them (a frame can be a megabyte of snapshot)."""

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        iv = os.urandom(_IV_BYTES)
        pad = _BLOCK_BYTES - len(data) % _BLOCK_BYTES
        encryptor = Cipher(self._aes, modes.CBC(iv)).encryptor()
        ciphertext = encryptor.update(data + bytes((pad,)) * pad) + encryptor.finalize()
        signed = b"\x80" + current_time.to_bytes(8, "big") + iv + ciphertext
        mac = hmac.digest(self._signing_key, signed, hashlib.sha256)
        return base64.urlsafe_b64encode(signed + mac)

    def extract_timestamp(self, token: bytes) -> int:
        """The token's time, once its HMAC checks (``InvalidToken`` otherwise)."""
        raw = self._verify(token)
        timestamp = int.from_bytes(raw[1:9], "big")
        self._verified = (token, raw)
        return timestamp

    def decrypt(self, token: bytes) -> bytes:
        known, raw = self._verified
        self._verified = _NOTHING_VERIFIED
        if known is not token:  # not the token just verified: verify this one
            raw = self._verify(token)
        decryptor = Cipher(self._aes, modes.CBC(raw[9:_HEADER_BYTES])).decryptor()
        try:
            padded = decryptor.update(raw[_HEADER_BYTES:-_MAC_BYTES]) + decryptor.finalize()
        except ValueError:
            raise InvalidToken from None
        pad = padded[-1] if padded else 0
        if not 1 <= pad <= _BLOCK_BYTES or padded[-pad:] != bytes((pad,)) * pad:
            raise InvalidToken
        return padded[:-pad]

    def _verify(self, token: bytes) -> bytes:
        """The token's bytes, decoded, when its form and HMAC are right."""
        try:
            raw = base64.urlsafe_b64decode(token)
        except (TypeError, binascii.Error):
            raise InvalidToken from None
        body_bytes = len(raw) - _HEADER_BYTES - _MAC_BYTES
        if raw[:1] != bytes((_VERSION,)) or body_bytes < _BLOCK_BYTES:
            raise InvalidToken
        if body_bytes % _BLOCK_BYTES:
            raise InvalidToken
        mac = hmac.digest(self._signing_key, raw[:-_MAC_BYTES], hashlib.sha256)
        if not hmac.compare_digest(mac, raw[-_MAC_BYTES:]):
            raise InvalidToken
        return raw


@functools.lru_cache(maxsize=8)
def _derived_key(password: bytes) -> bytes:
    """pysyncobj's key for a secret, derived once per process, not once per Raft group (a
    broker builds a node per replica; 100,000 PBKDF2 rounds each)."""
    return hashlib.pbkdf2_hmac("sha256", password, _PYSYNCOBJ_SALT, _PBKDF2_ITERATIONS, 32)


def frame_cipher(password: str | bytes) -> FrameCipher:
    """The cipher for a cluster secret: ``pysyncobj.encryptor.getEncryptor``'s key."""
    secret = password if isinstance(password, bytes) else password.encode()
    return FrameCipher(_derived_key(secret))


_installing = threading.RLock()
"""Held while pysyncobj's ``getEncryptor`` is swapped: no other thread builds a node then."""


@contextmanager
def installed() -> Iterator[None]:
    """Within it, in this thread, a pysyncobj node built with a password gets a
    ``FrameCipher``; pysyncobj's own ``getEncryptor`` is back afterwards."""
    with _installing:
        saved = pysyncobj.syncobj.getEncryptor
        pysyncobj.syncobj.getEncryptor = frame_cipher
        try:
            yield
        finally:
            pysyncobj.syncobj.getEncryptor = saved
