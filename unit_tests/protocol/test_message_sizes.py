"""Message and key sizes are UTF-8 bytes, exactly at the bounds, also for multi-byte text
(the parser skips the encoding only where the code-point count cannot hide an excess)."""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.requests import Produce

LIMITS = Limits(message_bytes_max=12, key_bytes_max=6)


def size_error(message: str, key: str | None = None) -> ErrorCode | None:
    try:
        Produce.parse({"topic": "t", "message": message, "key": key}, LIMITS)
    except RaftQError as error:
        return error.code
    return None


@pytest.mark.parametrize(
    ("message", "key", "expected"),
    [
        ("€€€€", None, None),  # 12 bytes: exactly the bound
        ("€€€€a", None, ErrorCode.TOO_LARGE),  # 13 bytes, 5 code points
        ("x" * 12, None, None),
        ("x" * 13, None, ErrorCode.TOO_LARGE),
        ("€€", "€€", None),  # 6 + 6 bytes
        ("€€a", "€€", ErrorCode.TOO_LARGE),  # 7 + 6
        ("a", "€€a", ErrorCode.TOO_LARGE),  # key of 7 bytes, 3 code points
        ("😀😀😀", None, None),  # 4-byte code points: 12 bytes
        ("😀😀😀a", None, ErrorCode.TOO_LARGE),
    ],
)
def test_sizes_are_utf8_bytes(message: str, key: str | None, expected: ErrorCode | None) -> None:
    assert size_error(message, key) == expected
