"""``FrameZlib`` writes zlib streams pysyncobj's own ``zlib.decompress`` reads, as small as
``zlib.compress``'s, and takes the place pysyncobj's connections look ``zlib`` up in."""

from __future__ import annotations

import inspect
import os
import pickle
import zlib

import pysyncobj.tcp_connection
import pytest
from pysyncobj.tcp_connection import TcpConnection

from runtime.replication.raft.frame_compression import (
    SMALL_FRAME_BYTES_MAX,
    STORED_FRAME_BYTES_MAX,
    FrameZlib,
    install,
    stored,
)


def frame(messages: int) -> bytes:
    """An AppendEntries-like frame carrying ``messages`` 100-byte messages."""
    entry = pickle.dumps(
        [(os.urandom(4).hex(), "x" * 100, 1_700_000_000_000 + i) for i in range(messages)]
    )
    return pickle.dumps((b"k" * 16, {"type": "append", "entries": [(b"\x00" + entry, 7, 3)]}), 2)


@pytest.mark.parametrize("messages", [0, 1, 10, 100, 1000])
def test_frames_of_every_size_round_trip_and_stay_as_small(messages: int) -> None:
    data = frame(messages)
    ours = FrameZlib.compress(data, 3)
    assert zlib.decompress(ours) == data  # what a node without FrameZlib does
    assert FrameZlib.decompress(ours) == data
    if len(data) < STORED_FRAME_BYTES_MAX:  # stored: the frame and 11 bytes
        assert len(ours) == len(data) + 11
    else:
        assert len(ours) <= len(zlib.compress(data, 3)) * 1.02 + 8


@pytest.mark.parametrize("size", [0, 1, 100, 255, 256, STORED_FRAME_BYTES_MAX - 1, 65_535])
def test_a_stored_frame_is_a_zlib_stream_any_node_reads(size: int) -> None:
    data = os.urandom(size)
    assert zlib.decompress(stored(data)) == data
    assert zlib.decompressobj().decompress(stored(data)) == data


def test_a_stored_frame_that_was_changed_is_refused() -> None:
    frame_bytes = bytearray(stored(b"heartbeat of term 3"))
    frame_bytes[10] ^= 1  # one bit of the data: Adler-32 no longer matches
    with pytest.raises(FrameZlib.error):
        FrameZlib.decompress(bytes(frame_bytes))
    with pytest.raises(FrameZlib.error):
        FrameZlib.decompress(stored(b"heartbeat")[:-1])  # cut short


@pytest.mark.parametrize(
    "size",
    [0, 1, 511, 512, 513, STORED_FRAME_BYTES_MAX, SMALL_FRAME_BYTES_MAX - 1, SMALL_FRAME_BYTES_MAX],
)
def test_window_edges(size: int) -> None:
    data = os.urandom(size)
    assert zlib.decompress(FrameZlib.compress(data, 3)) == data


def test_a_frame_from_a_node_without_it_is_read() -> None:
    data = frame(5)
    assert FrameZlib.decompress(zlib.compress(data, 3)) == data


def test_garbage_raises_zlibs_error() -> None:
    with pytest.raises(FrameZlib.error):
        FrameZlib.decompress(b"not a zlib stream")


def test_pysyncobj_compresses_through_its_module_name_which_install_points_here() -> None:
    """Pinned: TcpConnection.send and its frame parser use the module-level ``zlib`` at
    each call; if pysyncobj binds it otherwise, installing would silently do nothing."""
    sent = inspect.getsource(TcpConnection.send)
    parsed = inspect.getsource(TcpConnection._TcpConnection__processParseMessage)
    assert "zlib.compress(pickle.dumps(message), 3)" in sent
    assert "zlib.decompress(data)" in parsed
    install()
    assert pysyncobj.tcp_connection.zlib is FrameZlib
