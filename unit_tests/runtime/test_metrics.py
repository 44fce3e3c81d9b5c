"""``Metrics`` renders Prometheus' text format that Prometheus' own parser reads back:
counters, histograms and gauges read at scrape time."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from runtime.metrics import Metrics, Refreshed


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_counters_histograms_and_gauges_render_and_parse_back() -> None:
    metrics = Metrics("raftq_test")
    level = [3.0]
    metrics.gauge("depth", lambda: {(("topic", "a"),): level[0], (("topic", "b"),): 1.0})
    metrics.gauge("up", lambda: {(): 1.0})
    metrics.inc("produced_messages", 5, topic="a")
    metrics.inc("produced_messages", 2, topic="a")
    metrics.observe("http_request_seconds", 0.003, route="/logs")
    metrics.observe("http_request_seconds", 2.0, route="/logs")
    level[0] = 7.0  # read at scrape time
    samples = _samples(metrics.render())
    assert samples[("raftq_test_produced_messages_total", (("topic", "a"),))] == 7
    assert samples[("raftq_test_depth", (("topic", "a"),))] == 7
    assert samples[("raftq_test_depth", (("topic", "b"),))] == 1
    assert samples[("raftq_test_up", ())] == 1
    route = (("route", "/logs"),)
    assert samples[("raftq_test_http_request_seconds_count", route)] == 2
    assert samples[("raftq_test_http_request_seconds_bucket", (("le", "0.005"), *route))] == 1
    assert samples[("raftq_test_http_request_seconds_bucket", (("le", "+Inf"), *route))] == 2


def test_a_refreshed_value_is_computed_at_most_once_per_period() -> None:
    now = [0.0]
    computed: list[float] = []

    def compute() -> float:
        computed.append(now[0])
        return now[0]

    value = Refreshed(compute, 10.0, clock=lambda: now[0])
    assert [value() for _ in range(5)] == [0.0] * 5
    now[0] = 9.9
    assert value() == 0.0
    now[0] = 10.0
    assert value() == 10.0 and computed == [0.0, 10.0]
