"""``FrameZlib``: pysyncobj's frames compressed with a window the size of the frame.

pysyncobj (0.3.17) compresses every frame it sends with ``zlib.compress(data, 3)``. That
call sets up a full deflate state each time: a 32 KiB window and hash tables, some 256 KiB
allocated and cleared, whatever the frame's size. A single-message produce's frames are a
few hundred bytes, and setting up the state cost ten times the compression itself: 70-230
us per frame here against 10-25 us with a window just larger than the frame and a smaller
hash (in process, on the shared 2-core machine; issue 24, ARCHITECTURE.md "Performance"),
on each of the ~4 frames a request sends (an AppendEntries to each follower, each answer).

A frame shorter than ``STORED_FRAME_BYTES_MAX`` (a heartbeat, an answer, a one-message
append: an idle broker sends little else, issue 22) is not compressed at all: it travels as a
zlib stream of one stored block, made here by hand (header, length, the bytes, Adler-32), in
0.4 us against 5.6 us for ``compress`` of a 220-byte heartbeat, and read by
``zlib.decompress`` in a quarter of the time. It is some 60 bytes longer than compressed,
which nothing on a LAN notices.

A frame shorter than ``SMALL_FRAME_BYTES_MAX`` is compressed at the same level with a
window of the next power of two at or above its length (so every match the full window would
find is still found: the same size, within a few bytes) and ``memLevel`` 4; a longer one as
pysyncobj does. The output is an ordinary zlib stream whose header names its window, and
``zlib.decompress`` reads any window up to 32 KiB: nodes with and without this read each
other's frames (no new obstacle to a rolling upgrade), and nothing else about a frame
changes.

Installed process-wide (``install``): pysyncobj's connection module looks ``zlib`` up at
every send, so its name there is pointed at this class. Every pysyncobj node in a RaftQ
process is a ``RaftNode``, which installs it.
"""

from __future__ import annotations

import zlib

import pysyncobj.tcp_connection

STORED_FRAME_BYTES_MAX = 1024
"""Frames below this are stored, not compressed (at most 65,535: a stored block's length)."""
ZLIB_STORED_HEADER = b"\x78\x01"
"""zlib's header for deflate with a 32 KiB window and no dictionary (a multiple of 31)."""
STORED_FINAL_BLOCK = b"\x01"
"""Deflate's block header: the final block (BFINAL 1), stored (BTYPE 00)."""
SMALL_FRAME_BYTES_MAX = 16 * 1024
"""Frames below this get a window of their own size; above it the gain was gone (8 KiB
frames: within the noise) and a bigger window may compress better."""
WINDOW_BITS_MIN = 9
"""zlib's smallest window (512 bytes)."""
SMALL_FRAME_MEM_LEVEL = 4
"""Hash table of 2^11 entries: the same output as the default 8 on frames up to 16 KiB,
measured, for a quarter of the memory to clear."""


class FrameZlib:
    """What pysyncobj's connection module uses of ``zlib``: ``compress`` and
    ``decompress``."""

    error = zlib.error

    @staticmethod
    def compress(data: bytes, level: int = -1) -> bytes:
        if len(data) < STORED_FRAME_BYTES_MAX:
            return stored(data)
        if len(data) >= SMALL_FRAME_BYTES_MAX:
            return zlib.compress(data, level)
        window_bits = max(WINDOW_BITS_MIN, len(data).bit_length())
        compressor = zlib.compressobj(level, zlib.DEFLATED, window_bits, SMALL_FRAME_MEM_LEVEL)
        return compressor.compress(data) + compressor.flush()

    @staticmethod
    def decompress(data: bytes) -> bytes:
        return zlib.decompress(data)


def stored(data: bytes) -> bytes:
    """``data`` as a zlib stream of one stored deflate block (RFC 1950 and 1951, 3.2.4)."""
    length = len(data)
    return b"".join(
        (
            ZLIB_STORED_HEADER,
            STORED_FINAL_BLOCK,
            length.to_bytes(2, "little"),
            (length ^ 0xFFFF).to_bytes(2, "little"),
            data,
            zlib.adler32(data).to_bytes(4, "big"),
        )
    )


def install() -> None:
    """pysyncobj's connections compress their frames with ``FrameZlib`` from now on, in
    this process (idempotent)."""
    pysyncobj.tcp_connection.zlib = FrameZlib
