"""Offsets per topic and partition: Kafka's JSON form, resolving ``earliest``/``latest``,
data-loss checks and the per-trigger cap. Pure: no Spark, no I/O.

Every range is half-open, ``[start, end)``. RaftQ's log start offset is always 0 (there is no
retention yet), so ``earliest`` is 0; ``latest`` is a partition's end offset (the offset the
next message gets), read from the partition's leader.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Literal

TopicOffsets = dict[str, dict[int, int]]
"""``{topic: {partition_id: offset}}``."""
OffsetSpec = Literal["earliest", "latest"] | TopicOffsets
"""What the user asked for: a word, or offsets where -2 means earliest and -1 latest."""

EARLIEST = -2
LATEST = -1
LOG_START_OFFSET = 0


class DataLossError(RuntimeError):
    """Offsets went backwards or a partition vanished (a topic deleted and re-created?)."""


def parse_offset_spec(text: str, name: str) -> OffsetSpec:
    """``earliest``, ``latest`` or Kafka's JSON ``{"topic": {"0": 23, "1": -1}}``."""
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return "earliest" if word == "earliest" else "latest"
    try:
        return offsets_from_json(text, allow_special=True)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def offsets_from_json(
    text: str | Mapping[str, object], *, allow_special: bool = False
) -> TopicOffsets:
    """Parse Kafka's JSON form (a string, or the dict Spark hands a stream reader)."""
    try:
        raw = json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError as exc:
        raise ValueError(f"not 'earliest', 'latest' or JSON: {exc.msg}") from None
    if not isinstance(raw, Mapping):
        raise ValueError('expected a JSON object like {"topic": {"0": 23}}')
    lowest = EARLIEST if allow_special else 0
    result: TopicOffsets = {}
    for topic, partitions in raw.items():
        if not isinstance(topic, str) or not isinstance(partitions, Mapping):
            raise ValueError(f"topic {topic!r}: expected an object of partition -> offset")
        result[topic] = {
            _partition(topic, p): _offset(topic, p, o, lowest) for p, o in partitions.items()
        }
    return result


def offsets_to_json(offsets: TopicOffsets) -> str:
    """Kafka's JSON form, sorted, so equal offsets give equal text."""
    return json.dumps(to_stream_dict(offsets), sort_keys=True, separators=(",", ":"))


def to_stream_dict(offsets: TopicOffsets) -> dict[str, dict[str, int]]:
    """The dict a stream reader hands Spark (JSON keys are strings)."""
    return {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(offsets.items())}


def resolve(
    spec: OffsetSpec,
    partitions: Mapping[str, Sequence[int]],
    ends: TopicOffsets,
    *,
    missing: int,
    starts: TopicOffsets | None = None,
) -> TopicOffsets:
    """Concrete offsets for every partition of ``partitions``. A partition the JSON does not
    name gets ``missing`` (EARLIEST or LATEST); a topic it names that is not subscribed, or a
    partition that does not exist, is an error. EARLIEST is the partition's log start
    (``starts``; 0 when not given)."""
    if isinstance(spec, dict):
        _check_names(spec, partitions)
    result: TopicOffsets = {}
    for topic, ids in partitions.items():
        for partition in ids:
            if spec == "earliest":
                wanted = EARLIEST
            elif spec == "latest":
                wanted = LATEST
            else:
                wanted = spec.get(topic, {}).get(partition, missing)
            end = ends[topic][partition]
            first = (starts or {}).get(topic, {}).get(partition, LOG_START_OFFSET)
            value = {EARLIEST: first, LATEST: end}.get(wanted, wanted)
            result.setdefault(topic, {})[partition] = value
    return result


def check_start(
    start: TopicOffsets,
    ends: TopicOffsets,
    *,
    fail_on_data_loss: bool,
    starts: TopicOffsets | None = None,
) -> tuple[TopicOffsets, list[str]]:
    """Starts beyond a partition's end mean the log lost messages (it only grows, so the
    topic was re-created); starts below its log start (``starts``) mean retention removed
    messages not read yet. Raise ``DataLossError``, or with ``failOnDataLoss=false`` restart
    such a partition at the log start, as Kafka resets to earliest. Returns the starts and
    a warning per reset."""
    fixed: TopicOffsets = {}
    warnings: list[str] = []
    for topic, partitions in start.items():
        for partition, offset in partitions.items():
            end = ends.get(topic, {}).get(partition)
            first = (starts or {}).get(topic, {}).get(partition, LOG_START_OFFSET)
            if end is None:
                problem = f"{topic}/{partition}: the partition no longer exists"
            elif offset > end:
                problem = f"{topic}/{partition}: start offset {offset} is beyond the end {end}"
            elif offset < first:
                problem = (
                    f"{topic}/{partition}: start offset {offset} is below the log start "
                    f"{first} (retention removed what was not read yet)"
                )
            else:
                fixed.setdefault(topic, {})[partition] = offset
                continue
            if fail_on_data_loss:
                raise DataLossError(problem + " (set failOnDataLoss=false to go on)")
            warnings.append(problem + "; restarting at the log start")
            if end is not None:
                fixed.setdefault(topic, {})[partition] = first
    return fixed, warnings


def cap_offsets(start: TopicOffsets, latest: TopicOffsets, rows_max: int) -> TopicOffsets:
    """Ends that advance at most ``rows_max`` offsets in all (``maxOffsetsPerTrigger``),
    shared in proportion to each partition's backlog, as Kafka's source does; the rounding
    remainder goes to the largest backlogs first, so the result is deterministic."""
    backlog = {
        (t, p): max(0, end - start.get(t, {}).get(p, LOG_START_OFFSET))
        for t, ps in latest.items()
        for p, end in ps.items()
    }
    total = sum(backlog.values())
    if total <= rows_max:
        return {t: dict(ps) for t, ps in latest.items()}
    share = {tp: lag * rows_max // total for tp, lag in backlog.items()}
    left = rows_max - sum(share.values())
    for tp in sorted(backlog, key=lambda tp: (-(backlog[tp] - share[tp]), tp))[:left]:
        share[tp] += 1
    return {
        t: {p: start.get(t, {}).get(p, LOG_START_OFFSET) + share[(t, p)] for p in ps}
        for t, ps in latest.items()
    }


def _check_names(spec: TopicOffsets, partitions: Mapping[str, Sequence[int]]) -> None:
    for topic, named in spec.items():
        if topic not in partitions:
            raise ValueError(f"offsets name topic {topic!r}, which is not subscribed")
        unknown = sorted(set(named) - set(partitions[topic]))
        if unknown:
            raise ValueError(f"topic {topic!r} has no partition(s) {unknown}")


def _partition(topic: str, text: object) -> int:
    try:
        partition = int(str(text))
    except ValueError:
        raise ValueError(f"topic {topic!r}: partition {text!r} is not an integer") from None
    if partition < 0:
        raise ValueError(f"topic {topic!r}: partition {partition} is negative")
    return partition


def _offset(topic: str, partition: object, value: object, lowest: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < lowest:
        raise ValueError(f"{topic}/{partition}: offset {value!r} is not an integer >= {lowest}")
    return value
