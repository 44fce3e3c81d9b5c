"""The exactly-once commit protocol of bulk_consume, crashed at every point and rerun.
No Spark: the staging write is a function that writes files like Spark would."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.commit_protocol import (
    Hook,
    Layout,
    RunPlan,
    Step,
    committed_offsets,
    load_state,
    run_once,
)
from spark_jobs.offsets import TopicOffsets

POINTS = [
    "recorded started",
    "staging written",
    "recorded written",
    "moved",
    "recorded moved",
    "offsets committed",
    "recorded committed",
    "cleaned up",
    "recorded done",
]


class CrashError(Exception):
    """Stands for kill -9: nothing after the raising point happens."""


class Topic:
    """End offsets that move between runs, and a staging writer that writes part files."""

    def __init__(self) -> None:
        self.end: TopicOffsets = {"t": {0: 5, 1: 3}}
        self.writes = 0

    def plan_range(self, committed: TopicOffsets | None) -> tuple[TopicOffsets, TopicOffsets]:
        return (committed or {"t": {0: 0, 1: 0}}), self.end

    def write_staging(self, plan: RunPlan) -> None:
        self.writes += 1
        staging = Path(plan.staging)
        staging.mkdir(parents=True)
        for partition, end in sorted(plan.end["t"].items()):
            start = plan.start["t"][partition]
            rows = [f"{partition}:{o}" for o in range(start, end)]
            if rows:
                (staging / f"part-{partition}.txt").write_text("\n".join(rows))


def published(output: Path) -> dict[str, list[str]]:
    """Every published file and its rows, by relative path (hidden ``_`` paths excluded)."""
    return {
        str(p.relative_to(output)): p.read_text().split("\n")
        for p in sorted(output.rglob("*.txt"))
        if not any(part.startswith("_") for part in p.relative_to(output).parts)
    }


EXPECTED_RUN_1 = {
    "run=000001/part-0.txt": [f"0:{o}" for o in range(5)],
    "run=000001/part-1.txt": [f"1:{o}" for o in range(3)],
}


def crash_at(point: str) -> Hook:
    def hook(reached: str) -> None:
        if reached == point:
            raise CrashError(point)

    return hook


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_any_point_then_a_rerun_publishes_exactly_once(
    tmp_path: Path, point: str
) -> None:
    layout, topic = Layout(tmp_path), Topic()
    with pytest.raises(CrashError):
        run_once(layout, topic.plan_range, topic.write_staging, crash_at(point))
    topic.end = {"t": {0: 9, 1: 3}}  # the topic grows meanwhile: the rerun keeps its range
    finished = run_once(layout, topic.plan_range, topic.write_staging)
    if point == "recorded done":
        assert finished is not None and finished.run == 2  # run 1 was complete: a new run
    else:
        assert finished is not None and finished.run == 1 and finished.step is Step.DONE
        assert published(tmp_path) == EXPECTED_RUN_1
        assert committed_offsets(layout) == {"t": {0: 5, 1: 3}}
        assert not (tmp_path / "_staging").exists()
        # The staging copy is written again only if the crash hit before "written" was recorded.
        assert topic.writes == (2 if point == "staging written" else 1)
        finished = run_once(layout, topic.plan_range, topic.write_staging)
        assert finished is not None and finished.run == 2
    assert published(tmp_path) == {
        **EXPECTED_RUN_1,
        "run=000002/part-0.txt": [f"0:{o}" for o in range(5, 9)],
    }
    assert committed_offsets(layout) == {"t": {0: 9, 1: 3}}
    assert run_once(layout, topic.plan_range, topic.write_staging) is None  # nothing new


def test_partial_staging_from_a_crashed_write_is_discarded(tmp_path: Path) -> None:
    layout, topic = Layout(tmp_path), Topic()
    with pytest.raises(CrashError):
        run_once(layout, topic.plan_range, topic.write_staging, crash_at("recorded started"))
    state = load_state(layout)
    assert state is not None and state.step is Step.STARTED
    Path(state.staging).mkdir(parents=True)
    (Path(state.staging) / "part-9.txt").write_text("half a file")
    run_once(layout, topic.plan_range, topic.write_staging)
    assert published(tmp_path) == EXPECTED_RUN_1


def test_a_final_path_that_appeared_from_elsewhere_is_not_overwritten(tmp_path: Path) -> None:
    layout, topic = Layout(tmp_path), Topic()
    with pytest.raises(CrashError):
        run_once(layout, topic.plan_range, topic.write_staging, crash_at("recorded written"))
    (tmp_path / "run=000001").mkdir()
    with pytest.raises(FileExistsError):
        run_once(layout, topic.plan_range, topic.write_staging)
