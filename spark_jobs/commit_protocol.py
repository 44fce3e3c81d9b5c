"""Exactly-once output of ``bulk_consume``: the Databus producer-commit protocol (DESIGN §9,
seed 000) on a local or shared POSIX filesystem. No Spark here: the one step that needs
Spark (writing the staging copy) is a callable.

A run records its step in ``commit.json`` before doing what the next step needs, and every
side effect can be repeated safely, so a rerun after a crash anywhere resumes from the
recorded step:

| recorded step | Databus name | done so far | a rerun does |
|---|---|---|---|
| ``started`` | TRANS_COMMIT_START | range and paths chosen | rewrites staging from scratch |
| ``written`` | (staging complete) | staging holds the whole range | moves staging to final |
| ``moved`` | TRANS_MV_COMPLETE | final path published | records the committed offsets |
| ``committed`` | TRANS_CNSMR_COMPLETE | ``offsets.json`` = range end | cleans staging leftovers |
| ``done`` | SUCCESS_COMMIT | nothing left over | plans the next run |

The range ``[start, end)`` is fixed when the run starts and kept in ``commit.json``, so a
rerun writes exactly the same rows even if the topic grew meanwhile. Each state write is
atomic (temporary file, fsync, rename, fsync of the directory).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from spark_jobs.offsets import TopicOffsets, offsets_from_json, to_stream_dict

STATE_DIR_NAME = "_raftq"
STAGING_DIR_NAME = "_staging"


class Step(Enum):
    STARTED = "started"
    WRITTEN = "written"
    MOVED = "moved"
    COMMITTED = "committed"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class RunPlan:
    run: int
    start: TopicOffsets
    end: TopicOffsets
    staging: str
    final: str
    step: Step = Step.STARTED

    @property
    def rows(self) -> int:
        return sum(
            end - self.start.get(t, {}).get(p, 0)
            for t, ps in self.end.items()
            for p, end in ps.items()
        )


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a run's files go under the output directory. Paths starting with ``_`` are
    ignored by Spark's readers, so ``spark.read.parquet(output)`` sees only published runs
    (``run=000001``, ...: a ``run`` column)."""

    output: Path

    @property
    def state_dir(self) -> Path:
        return self.output / STATE_DIR_NAME

    @property
    def state_file(self) -> Path:
        return self.state_dir / "commit.json"

    @property
    def offsets_file(self) -> Path:
        return self.state_dir / "offsets.json"

    def staging(self, run: int) -> Path:
        return self.output / STAGING_DIR_NAME / f"run={run:06d}"

    def final(self, run: int) -> Path:
        return self.output / f"run={run:06d}"


RangePlanner = Callable[[TopicOffsets | None], tuple[TopicOffsets, TopicOffsets]]
Hook = Callable[[str], None]
"""Called with a point name after each side effect and each recorded step (progress, and the
tests' crash injection)."""


def run_once(
    layout: Layout,
    plan_range: RangePlanner,
    write_staging: Callable[[RunPlan], None],
    hook: Hook = lambda _point: None,
) -> RunPlan | None:
    """Finish a run a crash left behind, or plan and do a new one. ``plan_range`` gets the
    committed offsets (``None`` before the first run) and returns the next range's start
    and end. Returns the run finished, or ``None`` when there was nothing new to read."""
    plan = load_state(layout)
    if plan is None or plan.step is Step.DONE:
        plan = _new_plan(layout, plan_range, None if plan is None else plan.run)
        if plan is None:
            return None
        _record(layout, plan, hook)
    return resume(layout, plan, write_staging, hook)


def resume(
    layout: Layout, plan: RunPlan, write_staging: Callable[[RunPlan], None], hook: Hook
) -> RunPlan:
    """Carry ``plan`` from its recorded step to ``done``."""
    if plan.step is Step.STARTED:
        _remove(Path(plan.staging))  # a crashed write may have left part of it
        write_staging(plan)
        hook("staging written")
        plan = _record(layout, replace(plan, step=Step.WRITTEN), hook)
    if plan.step is Step.WRITTEN:
        _move(Path(plan.staging), Path(plan.final))
        hook("moved")
        plan = _record(layout, replace(plan, step=Step.MOVED), hook)
    if plan.step is Step.MOVED:
        _write_json(layout.offsets_file, to_stream_dict(plan.end))
        hook("offsets committed")
        plan = _record(layout, replace(plan, step=Step.COMMITTED), hook)
    if plan.step is Step.COMMITTED:
        _remove(Path(plan.staging))
        _remove_if_empty(Path(plan.staging).parent)
        hook("cleaned up")
        plan = _record(layout, replace(plan, step=Step.DONE), hook)
    return plan


def committed_offsets(layout: Layout) -> TopicOffsets | None:
    if not layout.offsets_file.exists():
        return None
    return offsets_from_json(layout.offsets_file.read_text())


def load_state(layout: Layout) -> RunPlan | None:
    if not layout.state_file.exists():
        return None
    raw = json.loads(layout.state_file.read_text())
    return RunPlan(
        run=int(raw["run"]),
        start=offsets_from_json(raw["start"]),
        end=offsets_from_json(raw["end"]),
        staging=str(raw["staging"]),
        final=str(raw["final"]),
        step=Step(raw["step"]),
    )


def _new_plan(layout: Layout, plan_range: RangePlanner, last_run: int | None) -> RunPlan | None:
    start, end = plan_range(committed_offsets(layout))
    run = (last_run or 0) + 1
    plan = RunPlan(run, start, end, str(layout.staging(run)), str(layout.final(run)))
    return plan if plan.rows > 0 else None


def _record(layout: Layout, plan: RunPlan, hook: Hook) -> RunPlan:
    state = {
        "run": plan.run,
        "step": plan.step.value,
        "start": to_stream_dict(plan.start),
        "end": to_stream_dict(plan.end),
        "staging": plan.staging,
        "final": plan.final,
    }
    _write_json(layout.state_file, state)
    hook(f"recorded {plan.step.value}")
    return plan


def _write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    with temporary.open("w") as handle:
        json.dump(value, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_dir(path.parent)


def _move(staging: Path, final: Path) -> None:
    """Publish staging as final with one rename. Repeating it after it happened is a no-op;
    finding neither means the output was tampered with, which must not pass silently."""
    if final.exists() and not staging.exists():
        return
    if not staging.exists():
        raise FileNotFoundError(f"neither staging {staging} nor final {final} exists")
    if final.exists():
        raise FileExistsError(f"{final} exists already; refusing to publish {staging} over it")
    final.parent.mkdir(parents=True, exist_ok=True)
    os.rename(staging, final)
    _fsync_dir(final.parent)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _remove_if_empty(path: Path) -> None:
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
