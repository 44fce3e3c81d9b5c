from __future__ import annotations

import pytest

from protocol.limits import Limits, LimitsError


def test_defaults_are_consistent() -> None:
    assert Limits().validate() == Limits()


def test_limits_that_contradict_each_other_are_refused() -> None:
    with pytest.raises(LimitsError, match="flush_batch_messages_max"):
        Limits(flush_batch_messages_max=10, partition_unflushed_messages_max=5).validate()
    with pytest.raises(LimitsError, match="raft_commit_timeout_s < http_timeout_s"):
        Limits(raft_commit_timeout_s=20.0).validate()
    with pytest.raises(LimitsError, match="must be positive"):
        Limits(http_retries_max=0).validate()


def test_overrides_are_typed_and_validated() -> None:
    limits = Limits().with_overrides({"flush_period_s": "0.2", "request_messages_max": "7"})
    assert limits.flush_period_s == 0.2
    assert limits.request_messages_max == 7
    with pytest.raises(LimitsError, match="unknown limit"):
        Limits().with_overrides({"nope": "1"})
    with pytest.raises(LimitsError, match="request_messages_max"):
        Limits().with_overrides({"request_messages_max": "many"})
