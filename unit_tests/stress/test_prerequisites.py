"""A missing prerequisite fails the test with its reason; only RAFTQ_ALLOW_SKIPS=1 skips."""

from __future__ import annotations

import pytest

from unit_tests.stress.prerequisites import ALLOW_SKIPS_ENV, require


def test_nothing_missing_lets_the_test_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_SKIPS_ENV, raising=False)
    require(None)


def test_a_missing_prerequisite_fails_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_SKIPS_ENV, raising=False)
    with pytest.raises(pytest.fail.Exception, match="no /dev/fuse; set RAFTQ_ALLOW_SKIPS=1"):
        require("no /dev/fuse")


@pytest.mark.parametrize("value", ["0", "", "yes"])
def test_only_the_exact_opt_out_skips(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ALLOW_SKIPS_ENV, value)
    with pytest.raises(pytest.fail.Exception):
        require("no /dev/fuse")
    monkeypatch.setenv(ALLOW_SKIPS_ENV, "1")
    with pytest.raises(pytest.skip.Exception, match="no /dev/fuse"):
        require("no /dev/fuse")
