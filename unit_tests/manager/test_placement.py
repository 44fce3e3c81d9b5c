"""Placement: alive brokers, least loaded first, spread, lowest free port."""

from __future__ import annotations

import pytest

from manager.placement import place_partitions, place_replacement
from manager.registry.brokers import BrokerRecord
from protocol.errors import ErrorCode, RaftQError
from protocol.types import BrokerId


def _broker(
    broker_id: int, *, alive: bool = True, ports: tuple[int, int] = (100, 199)
) -> BrokerRecord:
    return BrokerRecord(
        BrokerId(broker_id), f"http://b{broker_id}", f"h{broker_id}", ports[0], ports[1], alive, 1
    )


def test_three_brokers_host_every_partition_rotating_replica_zero() -> None:
    brokers = [_broker(1), _broker(2), _broker(3)]
    placed = place_partitions(range(3), 3, brokers, {}, {})
    assert [[b for b, _ in a] for a in placed] == [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
    assert placed[0] == ((1, "h1:100"), (2, "h2:100"), (3, "h3:100"))
    assert placed[1][0] == (2, "h2:101")


def test_brokers_sharing_a_host_never_share_an_address() -> None:
    brokers = [BrokerRecord(BrokerId(i), f"http://b{i}", "h", 100, 199, True, 1) for i in (1, 2, 3)]
    placed = place_partitions(range(2), 3, brokers, {}, {"h": {100}})
    addresses = [address for a in placed for _, address in a]
    assert len(set(addresses)) == 6 and "h:100" not in addresses


def test_least_loaded_first_and_partitions_spread() -> None:
    brokers = [_broker(i) for i in range(1, 6)]
    placed = place_partitions(range(2), 3, brokers, {BrokerId(1): 4}, {})
    first = sorted(b for b, _ in placed[0])
    second = sorted(b for b, _ in placed[1])
    assert first == [2, 3, 4]
    assert 5 in second and 1 not in first


def test_dead_brokers_are_skipped() -> None:
    brokers = [_broker(1), _broker(2, alive=False), _broker(3), _broker(4)]
    placed = place_partitions(range(1), 3, brokers, {}, {})
    assert sorted(b for b, _ in placed[0]) == [1, 3, 4]


def test_not_enough_alive_brokers() -> None:
    brokers = [_broker(1), _broker(2, alive=False)]
    with pytest.raises(RaftQError) as caught:
        place_partitions(range(1), 3, brokers, {}, {})
    assert caught.value.code is ErrorCode.NOT_ENOUGH_BROKERS


def test_lowest_free_port_and_no_free_port() -> None:
    brokers = [_broker(1, ports=(100, 102))]
    used = {"h1": {100, 102}}
    assert place_partitions(range(1), 1, brokers, {}, used) == (((1, "h1:101"),),)
    with pytest.raises(RaftQError) as caught:
        place_partitions(range(2), 1, brokers, {}, used)
    assert caught.value.code is ErrorCode.NOT_ENOUGH_BROKERS


def test_a_replacement_goes_to_the_least_loaded_broker_outside_the_partition() -> None:
    brokers = [_broker(1), _broker(2, alive=False), _broker(3), _broker(4), _broker(5)]
    counts = {BrokerId(1): 2, BrokerId(3): 2, BrokerId(4): 5, BrokerId(5): 3}
    used = {"h5": {100, 101}}
    assert place_replacement(_ids(1, 2, 3), brokers, counts, used) == (5, "h5:102")
    with pytest.raises(RaftQError) as raised:
        place_replacement(_ids(1, 2, 3, 4, 5), brokers, counts, used)
    assert raised.value.code is ErrorCode.NOT_ENOUGH_BROKERS


def _ids(*ids: int) -> list[BrokerId]:
    return [BrokerId(i) for i in ids]


def test_a_draining_broker_gets_no_new_replica() -> None:
    draining = BrokerRecord(BrokerId(4), "http://b4", "h4", 100, 199, True, 1, draining=True)
    brokers = [_broker(1), _broker(2), _broker(3), draining]
    placed = place_partitions(range(4), 3, brokers, {}, {})
    assert all(4 not in [b for b, _ in a] for a in placed)
