"""``python -m stress_tests.powercut MOUNT BACKING [--no-strict-directories]``: runs the
power-cut file system in the foreground until it is unmounted or sent SIGTERM (a clean stop:
afterwards everything in ``BACKING/live`` is durable, as after a real unmount). SIGKILL is a
power cut; ``PowerCutFS.cut()`` then rebuilds ``BACKING/live`` from the durable state."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from stress_tests.powercut.durable_store import DurableStore
from stress_tests.powercut.fs import PowerCutOperations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stress_tests.powercut")
    parser.add_argument("mount", type=Path, help="the mount point (an existing empty folder)")
    parser.add_argument("backing", type=Path, help="holds live/ and durable/")
    parser.add_argument(
        "--strict-directories",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="names are durable only when their directory is fsynced (default); with "
        "--no-strict-directories a file's fsync also makes its names durable (ext4-like)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    run(args.mount, args.backing, strict_directories=args.strict_directories)
    return 0


def run(mount: Path, backing: Path, strict_directories: bool) -> None:
    # Imported here: fusepy loads libfuse when imported and raises where it is missing.
    from fuse import FUSE  # noqa: PLC0415

    live_dir = backing / "live"
    store = DurableStore(backing / "durable")
    ids = store.claim_snapshot(live_dir)
    operations = PowerCutOperations(live_dir.resolve(), store, ids, strict_directories)
    # hard_remove: an unlinked open file is really unlinked (libfuse would otherwise rename it
    # to .fuse_hidden*, a name a directory fsync would then make durable). big_writes: writes
    # up to 128 KiB per request instead of 4 KiB. No writeback cache (libfuse 2 has none):
    # every write reaches this process when the caller makes it.
    FUSE(
        operations,
        str(mount),
        foreground=True,
        hard_remove=True,
        big_writes=True,
        fsname="powercut",
    )
    store.snapshot(live_dir)


if __name__ == "__main__":
    sys.exit(main())
