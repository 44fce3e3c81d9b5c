"""Adding and removing managers (``ClusterView``) over the in-memory registry twin: the
record and the Raft change, in that order; what every manager lists afterwards; and the
refusals that keep the group able to commit."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from manager.broker_client import BrokerClient
from manager.broker_monitor import BrokerMonitor
from manager.cluster import ClusterView
from manager.raft import RegistryTwin, registry_twin
from manager.services import ManagerServices, ServiceContext
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.requests import ManagerRef
from runtime.http_client import PeerLink
from unit_tests.manager.in_memory_app import applied_names, manager_config

LIMITS = Limits()
LINK = PeerLink(None, None)


@pytest.fixture
def view(tmp_path: Path) -> Iterator[tuple[ClusterView, RegistryTwin]]:
    registry = registry_twin()
    with ThreadPoolExecutor(2) as pool:
        service = ManagerServices.over(
            ServiceContext(LIMITS, registry, BrokerClient(LIMITS, LINK), BrokerMonitor(3.0), pool)
        )
        config = manager_config(tmp_path, LIMITS, port=7001, raft_port=7101)
        yield ClusterView(config, registry, service, pool, LINK, _proven), registry


def _proven(_ref: ManagerRef) -> None:
    """Every manager added here proves its address (``test_address_proof.py`` tests the
    check itself)."""


def _add(view: ClusterView, manager_id: int) -> tuple[dict[str, object], int]:
    url, raft = f"http://127.0.0.1:{7000 + manager_id}", f"127.0.0.1:{7100 + manager_id}"
    return view.add_manager(ManagerRef(manager_id, url, raft))


def test_added_managers_are_recorded_then_members_and_listed(
    view: tuple[ClusterView, RegistryTwin],
) -> None:
    cluster, registry = view
    for manager_id in (2, 3, 4):
        assert _add(cluster, manager_id)[1] == 201
    assert registry.members() == {"127.0.0.1:7102", "127.0.0.1:7103", "127.0.0.1:7104"}
    assert [p.manager_id for p in cluster.peers()] == [1, 2, 3, 4]
    assert applied_names(registry)[-3:] == ["add_manager"] * 3
    assert _add(cluster, 4)[1] == 200  # a repeat
    with pytest.raises(RaftQError) as taken:
        cluster.add_manager(ManagerRef(5, "http://127.0.0.1:7005", "127.0.0.1:7104"))
    assert taken.value.code is ErrorCode.ID_TAKEN


def test_a_removed_manager_leaves_the_group_and_its_id_is_retired(
    view: tuple[ClusterView, RegistryTwin],
) -> None:
    cluster, registry = view
    for manager_id in (2, 3, 4):
        _add(cluster, manager_id)
    cluster.remove_manager(3)
    assert "127.0.0.1:7103" not in registry.members()
    assert [p.manager_id for p in cluster.peers()] == [1, 2, 4]
    with pytest.raises(RaftQError) as retired:
        _add(cluster, 3)
    assert retired.value.code is ErrorCode.ID_TAKEN
    with pytest.raises(RaftQError) as too_few:
        cluster.remove_manager(2)  # three must stay
    assert too_few.value.code is ErrorCode.INVALID_FIELD


def test_the_leader_hands_over_rather_than_remove_itself(
    view: tuple[ClusterView, RegistryTwin],
) -> None:
    cluster, registry = view
    for manager_id in (2, 3, 4):
        _add(cluster, manager_id)
    with pytest.raises(RaftQError) as handed:
        cluster.remove_manager(1)
    assert handed.value.code is ErrorCode.NOT_LEADER
    # To the member that holds the most, which the Raft layer picks (not a named one: it
    # may be down or behind, and then every hand-off is refused).
    assert registry.transfers == [None]
    assert len(registry.members()) == 3  # nothing removed


def test_changes_that_could_stop_the_group_are_refused(
    view: tuple[ClusterView, RegistryTwin],
) -> None:
    cluster, registry = view
    for manager_id in (2, 3, 4, 5):
        _add(cluster, manager_id)
    registry.silent_members = 1  # one of five does not answer
    with pytest.raises(RaftQError) as away:
        _add(cluster, 6)
    assert away.value.code is ErrorCode.INVALID_FIELD and "do not answer" in away.value.message
    registry.silent_members = 2  # two of five: removing a live one would leave 2 of 4
    before = list(applied_names(registry))
    with pytest.raises(RaftQError) as quorum:
        cluster.remove_manager(5)
    assert quorum.value.code is ErrorCode.INVALID_FIELD
    assert applied_names(registry) == before and len(registry.members()) == 4
