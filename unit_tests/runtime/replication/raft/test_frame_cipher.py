"""FrameCipher writes and reads the very tokens pysyncobj's Fernet does, under the key
pysyncobj derives from the same secret, and refuses what Fernet refuses."""

from __future__ import annotations

import base64
import pickle
import zlib

import pysyncobj.encryptor
import pysyncobj.syncobj
import pytest
from cryptography.fernet import Fernet, InvalidToken

from runtime.replication.raft.frame_cipher import FrameCipher, frame_cipher, installed

SECRET = "cluster secret"


@pytest.fixture(scope="module")
def theirs() -> Fernet:
    """pysyncobj's own encryptor for the secret (100,000 PBKDF2 rounds: once)."""
    fernet = pysyncobj.encryptor.getEncryptor(SECRET)
    assert isinstance(fernet, Fernet)
    return fernet


def frame(size: int) -> bytes:
    """What pysyncobj encrypts: a pickled message, compressed."""
    return zlib.compress(pickle.dumps((b"k" * 16, {"entries": [b"x" * size]})), 3)


@pytest.mark.parametrize("size", [0, 1, 15, 16, 100, 5000])
def test_tokens_cross_both_ways(theirs: Fernet, size: int) -> None:
    ours, data = frame_cipher(SECRET), frame(size)
    token = ours.encrypt_at_time(data, 1234)
    assert theirs.extract_timestamp(token) == 1234
    assert theirs.decrypt(token) == data
    token = theirs.encrypt_at_time(data, 99)
    assert ours.extract_timestamp(token) == 99
    assert ours.decrypt(token) == data


@pytest.mark.parametrize("plaintext", [b"", b"a", b"b" * 16, b"c" * 33])
def test_any_length_round_trips(plaintext: bytes) -> None:
    ours = frame_cipher(SECRET)
    token = ours.encrypt_at_time(plaintext, 7)
    assert ours.decrypt(token) == plaintext  # without extract_timestamp first, too


def test_the_key_is_pysyncobjs_for_bytes_and_str(theirs: Fernet) -> None:
    token = frame_cipher(SECRET.encode()).encrypt_at_time(b"hello", 1)
    assert theirs.decrypt(token) == b"hello"


def tampered(token: bytes, index: int) -> bytes:
    raw = bytearray(base64.urlsafe_b64decode(token))
    raw[index] ^= 0x01
    return base64.urlsafe_b64encode(bytes(raw))


@pytest.mark.parametrize("index", [0, 1, 9, 30, -1])
def test_a_changed_byte_is_refused_by_both_calls(index: int) -> None:
    ours = frame_cipher(SECRET)
    token = tampered(ours.encrypt_at_time(b"payload", 5), index)
    with pytest.raises(InvalidToken):
        ours.extract_timestamp(token)
    with pytest.raises(InvalidToken):
        ours.decrypt(token)


def test_another_key_and_garbage_are_refused() -> None:
    token = frame_cipher("another secret").encrypt_at_time(b"payload", 5)
    ours = frame_cipher(SECRET)
    for bad in (token, b"", b"not base64 !", base64.urlsafe_b64encode(b"\x80" + b"\0" * 60)):
        with pytest.raises(InvalidToken):
            ours.extract_timestamp(bad)
        with pytest.raises(InvalidToken):
            ours.decrypt(bad)


def test_decrypt_verifies_a_token_other_than_the_one_just_verified() -> None:
    ours = frame_cipher(SECRET)
    good = ours.encrypt_at_time(b"good", 1)
    ours.extract_timestamp(good)
    with pytest.raises(InvalidToken):
        ours.decrypt(tampered(good, 30))  # an equal-length token, not the verified one
    assert ours.decrypt(good) == b"good"  # verified again, not taken from memory


def test_a_key_is_32_bytes() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        FrameCipher(b"short")


def test_installed_only_within() -> None:
    before = pysyncobj.syncobj.getEncryptor
    with installed():
        assert isinstance(pysyncobj.syncobj.getEncryptor(SECRET), FrameCipher)
    assert pysyncobj.syncobj.getEncryptor is before
