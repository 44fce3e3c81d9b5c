from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from protocol.limits import Limits, LimitsError, PartitionLimits


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


def test_partition_limits_from_an_older_snapshot_load_with_defaults_and_pickle_again() -> None:
    """A manager's registry and a partition's log pickle their topics' ``PartitionLimits``.
    One written before the consumer groups' limits existed lacks them: loading it must
    give the defaults, and pickling it again (the next snapshot) must work. Before, the
    fields stayed unset and the next snapshot raised in the managers' tick thread: a
    manager restarted on newer code never compacted again and the group lost its leader."""
    current = Limits().partition_limits()
    written_before = pickle.dumps(current)
    state = current.__getstate__()[:-4]  # as pickled before the four group limits
    older = PartitionLimits.__new__(PartitionLimits)
    older.__setstate__(state)
    assert older == replace(
        current,
        groups_max=100,
        group_leases_max=10_000,
        group_unsettled_max=100_000,
        group_scan_max=10_000,
    )
    assert pickle.loads(pickle.dumps(older)) == older
    assert pickle.loads(written_before) == current
