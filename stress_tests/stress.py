"""The single-threaded stress run: every producer and consumer takes its turn on one thread,
so a failing history is as simple as it gets. Same options as ``stress_threaded``:
``python -m stress_tests.stress --plan leader-kills --seed 7``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from stress_tests.stress_threaded import main as threaded_main


def main(argv: Sequence[str] | None = None) -> int:
    return threaded_main(argv, threaded=False)


if __name__ == "__main__":
    sys.exit(main())
