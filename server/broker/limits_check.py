"""At start: this broker's limits against those of the brokers already running.

Brokers started with other limits (a ``[limits]`` table edited in one node file only) would
behave differently under the same load: a start with limits that differ from a running
broker's is refused, naming each difference (issue 11), unless ``--limits-may-differ`` says
it is a rolling change. The partitions' own limits never differ: they are recorded with
each topic (``PartitionLimits``). A broker that does not answer, or managers not up yet, are
skipped: the check then runs at the next broker's start. One attempt per call, bounded by
``manager_peer_check_timeout_s``, before the broker binds its port or starts Raft.
"""

from __future__ import annotations

import dataclasses
import json

from broker.config import BrokerConfig
from broker.managers import Managers
from protocol.errors import RaftQError
from protocol.limits import Limits
from runtime.http_client import JsonHttpClient


class LimitsDifferError(ValueError):
    """A running broker has other limits; the process refuses to start."""


def limits_as_json(limits: Limits) -> dict[str, object]:
    """Every limit, as ``/raft_status`` shows it to nodes (JSON values, so two brokers'
    compare as they are)."""
    loaded: dict[str, object] = json.loads(json.dumps(dataclasses.asdict(limits)))
    return loaded


def check_limits_agree(config: BrokerConfig, client: JsonHttpClient) -> None:
    """Raise ``LimitsDifferError`` naming the limits that differ from a running broker's."""
    if config.limits_may_differ:
        return
    timeout_s = config.limits.manager_peer_check_timeout_s
    try:
        listed = Managers(config.managers, config.limits, client).call_ok(
            "GET", "/brokers", timeout_s=timeout_s
        )
    except RaftQError:
        return  # the managers are not up yet
    brokers = listed.get("brokers") if isinstance(listed, dict) else None
    ours = limits_as_json(config.limits)
    for broker in brokers if isinstance(brokers, list) else []:
        if not isinstance(broker, dict) or broker.get("broker_id") == config.broker_id:
            continue
        if broker.get("alive") is not True:
            continue
        try:
            answer = client.call("GET", f"{broker['address']}/raft_status", timeout_s=timeout_s)
        except RaftQError:
            continue
        theirs = answer.body.get("limits") if isinstance(answer.body, dict) else None
        if not isinstance(theirs, dict):
            continue
        differ = sorted(
            name for name in ours.keys() | theirs.keys() if ours.get(name) != theirs.get(name)
        )
        if differ:
            shown = "; ".join(
                f"{name}: {theirs.get(name)} there, {ours.get(name)} here" for name in differ
            )
            raise LimitsDifferError(
                f"broker {broker.get('broker_id')} ({broker.get('address')}) runs with other "
                f"limits ({shown}): every broker's [limits] must agree (raftq node check), "
                "or start with --limits-may-differ during a rolling change"
            )
