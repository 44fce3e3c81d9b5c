"""What a workload may run beside its proposals: the operations that run a cluster (a
broker lost for good, a drain, re-replication, each replica's flusher), as a component's
own code does them, on the simulated nodes.

A workload that has them gives ``Workload.operations`` a factory; the simulation hands it
a ``World`` (the nodes, who leads, a fresh node, hosting one) and calls it back:

- ``act``: one of the scheduler's actions (``SimConfig.operate_p``), such as losing a node
  or starting a drain;
- ``after_tick``: every step, after the nodes ticked (a flush round, a mover's round),
  also while the group settles;
- ``check``: every step after the group's own checks (raise ``InvariantError``);
- ``unfinished``: what is still to finish (a move), or ``None``: the group has settled
  only once it is ``None``, and a run whose operations never finish fails (liveness).

Here so that ``runtime`` keeps importing no component: the operations themselves live with
the workloads (``stress_tests``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Protocol

from runtime.replication.machine import C, R, S
from runtime.replication.raft.sim.nodes import SimNode


class World(Protocol[S, C, R]):
    def nodes(self) -> Mapping[str, SimNode[S, C, R]]:
        """Every node ever made, by address (up, down, retired or never started)."""
        ...

    def leader(self) -> SimNode[S, C, R] | None:
        """The node up that leads in the highest term, if any."""
        ...

    def fresh_node(self) -> SimNode[S, C, R]:
        """A node never started, with an address never used before."""
        ...

    def host(self, node: SimNode[S, C, R], partners: tuple[str, ...]) -> None:
        """Start ``node`` (new) with these partners, as a broker hosting a replica."""
        ...

    def note(self, line: str) -> None:
        """A line in the run's trace."""
        ...


class Operations(Protocol):
    def act(self, rng: random.Random) -> str: ...

    def after_tick(self) -> None: ...

    def check(self) -> None: ...

    def unfinished(self) -> str | None: ...
