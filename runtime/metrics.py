"""A minimal Prometheus text-format registry (counters and gauges), thread-safe."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Metrics:
    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._gauges: dict[str, Callable[[], dict[tuple[tuple[str, str], ...], float]]] = {}

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._counters[key] = self._counters.get(key, 0.0) + amount

    def gauge(
        self, name: str, read: Callable[[], dict[tuple[tuple[str, str], ...], float]]
    ) -> None:
        """Register a gauge whose labelled values are read when metrics are rendered."""
        with self._lock:
            self._gauges[name] = read

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            counters = sorted(self._counters.items())
            gauges = list(self._gauges.items())
        for (name, labels), value in counters:
            lines.append(f"{self._prefix}_{name}_total{_labels(labels)} {value:g}")
        for name, read in gauges:
            for labels, value in sorted(read().items()):
                lines.append(f"{self._prefix}_{name}{_labels(labels)} {value:g}")
        return "\n".join(lines) + "\n"


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return "{" + inner + "}"
