"""``Metrics``: one process's Prometheus metrics (prometheus-client), thread-safe.

Counters and histograms are made at their first use, named ``<prefix>_<name>``; gauges are
read when ``/metrics`` is scraped (``gauge(name, read)``), so they never go stale and cost
nothing between scrapes. ``runtime.http_api.count_requests`` gives every node the same
request counter and latency histogram.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

T = TypeVar("T")
Labels = tuple[tuple[str, str], ...]
"""A gauge value's labels: ``(name, value)`` pairs, always in the same order."""
GaugeRead = Callable[[], Mapping[Labels, float]]

REQUEST_SECONDS_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Request handling time: from half a millisecond (one message at a broker) to the HTTP
timeout."""


class Metrics:
    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._lock = threading.Lock()
        self._registry = CollectorRegistry(auto_describe=False)
        self._counters: dict[str, Counter] = {}
        self._histograms: dict[str, Histogram] = {}
        self._gauges = _Gauges(prefix)
        self._registry.register(self._gauges)

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        with self._lock:
            counter = self._counters.get(name)
            if counter is None:
                counter = Counter(
                    f"{self._prefix}_{name}", name, sorted(labels), registry=self._registry
                )
                self._counters[name] = counter
        (counter.labels(**labels) if labels else counter).inc(amount)

    def observe(self, name: str, value: float, **labels: str) -> None:
        """One observation of histogram ``name`` (seconds: ``REQUEST_SECONDS_BUCKETS``)."""
        with self._lock:
            histogram = self._histograms.get(name)
            if histogram is None:
                histogram = Histogram(
                    f"{self._prefix}_{name}",
                    name,
                    sorted(labels),
                    buckets=REQUEST_SECONDS_BUCKETS,
                    registry=self._registry,
                )
                self._histograms[name] = histogram
        (histogram.labels(**labels) if labels else histogram).observe(value)

    def gauge(self, name: str, read: GaugeRead) -> None:
        """Register a gauge whose labelled values are read when metrics are rendered."""
        self._gauges.add(name, read)

    def render(self) -> str:
        return generate_latest(self._registry).decode("utf-8")


class Refreshed(Generic[T]):
    """A value computed at most once per ``period_s``, however often it is asked for: a
    scrape of figures that cost database reads then costs them at the node's own pace, not
    the scrapers'. Thread-safe; a caller that finds it stale computes it (the others wait
    and take that)."""

    def __init__(
        self,
        compute: Callable[[], T],
        period_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._compute = compute
        self._period_s = period_s
        self._clock = clock
        self._lock = threading.Lock()
        self._value: tuple[float, T] | None = None
        """(when computed, value)."""

    def __call__(self) -> T:
        with self._lock:
            now_s = self._clock()
            if self._value is None or now_s - self._value[0] >= self._period_s:
                self._value = (now_s, self._compute())
            return self._value[1]


class _Gauges(Collector):
    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._lock = threading.Lock()
        self._reads: dict[str, GaugeRead] = {}

    def add(self, name: str, read: GaugeRead) -> None:
        with self._lock:
            self._reads[name] = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            reads = list(self._reads.items())
        for name, read in reads:
            values = read()
            label_names = [label for label, _ in next(iter(values), ())]
            family = GaugeMetricFamily(f"{self._prefix}_{name}", name, labels=label_names)
            for labels, value in sorted(values.items()):
                family.add_metric([v for _, v in labels], value)
            yield family
