"""``TaskProgress``: a progress bar for the bulk jobs, with rate and ETA (tqdm).

What the driver can count without slowing the job: the Spark tasks of the stages it runs
(``SparkContext.statusTracker``), polled every ``period_s`` from a daemon thread. A stage's
tasks are known once it starts, so the total can grow as later stages appear (the ETA is
then for what is known). By default the bar shows only on a terminal, as tqdm does.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from pyspark.sql import SparkSession
from tqdm import tqdm


class TaskProgress:
    def __init__(
        self,
        spark: SparkSession,
        label: str,
        *,
        period_s: float = 1.0,
        out: TextIO | None = None,
        show: bool | None = None,
    ) -> None:
        """``show``: ``None`` shows the bar on a terminal only; True or False always or never."""
        self._tracker = spark.sparkContext.statusTracker()
        self._period_s = period_s
        self._stop = threading.Event()
        self._stages: dict[int, tuple[int, int]] = {}
        """Stage id -> (tasks, tasks done): kept after the stage ends."""
        disable = None if show is None else not show  # tqdm's None: only on a terminal
        self._bar = tqdm(total=0, desc=label, unit="task", file=out or sys.stderr, disable=disable)
        self._thread = threading.Thread(target=self._run, name="task-progress", daemon=True)

    def __enter__(self) -> TaskProgress:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(self._period_s + 10)
        self._poll(finished=True)
        self._bar.close()

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            self._poll(finished=False)

    def _poll(self, *, finished: bool) -> None:
        active = set()
        for stage_id in self._tracker.getActiveStageIds():
            info = self._tracker.getStageInfo(stage_id)
            if info is not None:
                active.add(stage_id)
                self._stages[stage_id] = (info.numTasks, info.numCompletedTasks)
        for stage_id, (tasks, _) in list(self._stages.items()):
            if finished or stage_id not in active:  # an ended stage ran all its tasks
                self._stages[stage_id] = (tasks, tasks)
        self._bar.total = sum(tasks for tasks, _ in self._stages.values())
        self._bar.n = sum(done for _, done in self._stages.values())
        self._bar.refresh()
