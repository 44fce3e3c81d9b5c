"""What a test needs of the machine (FUSE, a peer's server), and the one policy when it is
missing: the test fails, naming what is missing, so CI cannot turn green by skipping a proof.
Only an explicit opt-out, ``RAFTQ_ALLOW_SKIPS=1`` in the environment, makes it a skip
instead (for a developer's machine that cannot have it)."""

from __future__ import annotations

import os

import pytest

ALLOW_SKIPS_ENV = "RAFTQ_ALLOW_SKIPS"


def require(missing: str | None) -> None:
    """Return when ``missing`` is None; otherwise fail the test with it (skip it only under
    ``RAFTQ_ALLOW_SKIPS=1``)."""
    if missing is None:
        return
    if os.environ.get(ALLOW_SKIPS_ENV) == "1":
        pytest.skip(f"{missing} ({ALLOW_SKIPS_ENV}=1)")
    pytest.fail(f"{missing}; set {ALLOW_SKIPS_ENV}=1 to skip instead", pytrace=False)
