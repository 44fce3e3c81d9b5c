"""One stress run with many producer and consumer threads through the load balancer:
``python -m stress_tests.stress_threaded --plan leader-kills --seed 7``. Exits 1 when the
checker (or the run's validity) fails. ``stress.py`` is the one-thread version."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from stress_tests.runner import RunConfig
from stress_tests.session import base_arguments, cluster_session, run_all, seed_or_clock, work_dir
from stress_tests.tiers import PLANS


def main(argv: Sequence[str] | None = None, *, threaded: bool = True) -> int:
    parser = base_arguments(__doc__ or "")
    parser.add_argument("--plan", choices=sorted(PLANS), default="no-faults")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--messages", type=int, default=5_000, help="acknowledged, at least")
    parser.add_argument("--duration-s", type=float, default=120.0, help="at most")
    args = parser.parse_args(argv)
    seed = seed_or_clock(args.seed)
    print(f"seed {seed} (replay with --seed {seed})", flush=True)
    config = RunConfig(
        PLANS[args.plan],
        seed,
        producers=args.producers,
        consumers=args.consumers,
        threaded=threaded,
        messages_target=args.messages,
        duration_s_max=args.duration_s,
    )
    with cluster_session(work_dir(args.dir), args.base_port) as cluster:
        reports = run_all(cluster, [config], args.out)
    return 0 if all(r.passed for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
