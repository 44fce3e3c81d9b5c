"""Consumer groups with leased delivery (issue 20): defining them, and their figures from
the partitions' leaders."""

from __future__ import annotations

from manager.registry import commands
from manager.registry.outcome import Outcome
from manager.registry.topics import TopicRecord
from manager.services.context import ServiceContext, check_outcome
from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import CreateGroup


class GroupService:
    """Define consumer groups; their settings and figures."""

    def __init__(self, context: ServiceContext) -> None:
        self._context = context
        self._limits = context.limits
        self._raft = context.raft
        self._brokers = context.brokers

    def create_group(self, request: CreateGroup) -> tuple[dict[str, object], bool]:
        """Define a consumer group: the group, and True when it was made; False when it
        exists with these settings (nothing is proposed: a client may declare its group at
        every start);
        409 TOPIC_EXISTS when it exists with others; 404 UNKNOWN_TOPIC for its topic or
        dead-letter topic; 400 INVALID_FIELD past the topic's bound on groups. A refusal
        changes nothing (apply's refusals neither)."""
        topic = self._context.topic(request.topic)
        dead = request.dead_letter_topic
        if dead is not None and self._raft.read(lambda s: s.topics.get(dead)) is None:
            raise RaftQError(ErrorCode.UNKNOWN_TOPIC, f"unknown dead-letter topic {dead!r}")
        command = commands.DefineGroup(
            request.topic,
            request.group,
            request.visibility_timeout_ms,
            request.max_deliveries,
            dead,
            request.ordering.value,
            self._limits.group_visibility_timeout_ms_min,
            self._limits.group_visibility_timeout_ms_max,
            self._limits.group_max_deliveries_max,
            self._groups_max(topic),
        )
        known = self._raft.read(lambda s: s.groups.get(request.topic, request.group))
        if known is None:
            outcome = self._raft.propose(command)
        else:
            same = known.same_settings(command.entry(known.version))
            outcome = Outcome.UNCHANGED if same else Outcome.EXISTS
        where = f"consumer group {request.group!r} of topic {request.topic!r}"
        if outcome is Outcome.EXISTS:
            raise self._group_conflict(where, command)
        if outcome is Outcome.TOO_MANY:
            raise RaftQError(
                ErrorCode.INVALID_FIELD,
                f"{where}: topic {request.topic!r} has {command.groups_max} consumer groups, "
                "the most it may have (partition_groups_max: every group lives in every "
                "partition of its topic)",
            )
        check_outcome(outcome, where)
        entry = self._raft.read(lambda s: s.groups.get(request.topic, request.group))
        if entry is None:  # groups are never removed
            raise RaftQError(ErrorCode.INTERNAL, f"{where} was defined but is not found")
        return entry.to_json(), outcome is Outcome.CREATED

    def groups(self, topic: str | None) -> dict[str, object]:
        """One topic's consumer groups by name (404 for an unknown topic), each with its
        figures summed over the partitions' leaders (``GET {broker}/groups``: lag in
        messages and the oldest unsettled message's age, in flight, dead letters waiting
        and moved), and per partition (``partitions``); a partition that did not answer
        is in ``unavailable_partitions``; or every
        topic's groups (``topic`` None), by topic and name, settings only."""
        if topic is None:
            entries = self._raft.read(lambda s: s.groups.all())
            return {"groups": [entry.to_json() for entry in entries]}
        record = self._context.topic(topic)
        entries = self._raft.read(lambda s: s.groups.of_topic(record.name))
        figures, unavailable = self._group_figures(record, [e.group for e in entries])
        groups = [
            {**entry.to_json(), **_summed(figures[entry.group]), "partitions": figures[entry.group]}
            for entry in entries
        ]
        return {"groups": groups, "unavailable_partitions": sorted(unavailable)}

    def _group_figures(
        self, topic: TopicRecord, names: list[str]
    ) -> tuple[dict[str, list[dict[str, object]]], list[int]]:
        """Each of the groups ``names``' figures per partition, from the partitions'
        leaders; a group that has not received in a partition has that partition's own."""
        leaders, unavailable = self._context.leading_brokers(topic)
        by_group: dict[str, list[dict[str, object]]] = {name: [] for name in names}
        for address, partition_ids in leaders.items():
            try:
                found, partitions = self._brokers.group_figures(address, topic.name)
            except RaftQError:
                unavailable.extend(partition_ids)
                continue
            # A broker leaves out a partition it no longer leads (see consumer_lag).
            own = {p.get("partition_id"): p for p in partitions}
            unavailable.extend(p for p in partition_ids if p not in own)
            of = {(f.get("group"), f.get("partition_id")): f for f in found}
            for name in names:
                for partition_id in partition_ids:
                    figures = of.get((name, partition_id), own.get(partition_id))
                    if figures is not None:
                        by_group[name].append({**figures, "group": name})
        for per_partition in by_group.values():
            per_partition.sort(key=lambda f: int(str(f.get("partition_id"))))
        return by_group, unavailable

    def _group_conflict(self, where: str, command: commands.DefineGroup) -> RaftQError:
        """409: the group exists with other settings; the message says which differ."""
        known = self._raft.read(lambda s: s.groups.get(command.topic, command.group))
        held = {} if known is None else known.to_json()
        asked = command.entry(0).to_json()
        differences = ", ".join(
            f"{name} is {held[name]!r}, not {value!r}"
            for name, value in asked.items()
            if name in held and held[name] != value
        )
        return RaftQError(
            ErrorCode.TOPIC_EXISTS, f"{where} exists with other settings: {differences}"
        )

    def _groups_max(self, topic: TopicRecord) -> int:
        """Groups a topic may have: this manager's ``partition_groups_max``, or the lower
        bound its partitions were created with (they refuse a group past their own)."""
        bound = self._limits.partition_groups_max
        recorded = topic.partition_limits
        return bound if recorded is None else min(bound, recorded.groups_max)


def _summed(per_partition: list[dict[str, object]]) -> dict[str, object]:
    """A group's figures over its partitions: counts added, the oldest age kept."""

    def total(name: str) -> int:
        return sum(int(str(f.get(name, 0))) for f in per_partition)

    ages = [float(str(f.get("lag_s", 0))) for f in per_partition]
    return {
        "lag_messages": total("lag_messages"),
        "lag_s": max(ages, default=0.0),
        "in_flight": total("in_flight"),
        "dead_letters_pending": total("dead_letters_pending"),
        "dead_lettered": total("dead_lettered"),
    }
