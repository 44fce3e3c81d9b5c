"""The asynchronous producer's row (issue 24): eight threads share one ``AsyncProducer`` and
send 100-byte unkeyed messages as fast as ``send`` takes them for ``seconds``, then flush.

Throughput is the acknowledged messages over the wall time from the first ``send`` to the
end of the flush (every message counted was acknowledged, none is left in the buffer).
Latency is from the return of ``send`` to the future's completion, sampled (one message in
``LATENCY_SAMPLE_EVERY`` has a callback; the others' futures are counted after the flush, so
the measuring costs the sending threads next to nothing). Under this saturating load it is
mostly the time a record waits in the full buffer behind the batches before it. The
producer uses the library's defaults (direct path, ``linger_ms``, batch and buffer bounds),
as a user's would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from raftq import AsyncProducer, ClientLimits, PartitionOffset
from stress_tests.bench_http import VALUE
from stress_tests.bench_load import JOIN_GRACE_S
from stress_tests.bench_report import RAFTQ, Row, percentile

SCENARIO = "8 threads sharing one asynchronous producer, 100-byte messages"
KEY = "async publish, 8 threads, 1 client"
THREADS = 8
LATENCY_SAMPLE_EVERY = 64
FLUSH_WAIT_S = 120.0


class _Counts:
    """Every future sent, and the sampled latencies (any thread)."""

    def __init__(self) -> None:
        self.futures: list[Future[PartitionOffset]] = []
        self.latencies_s: list[float] = []
        self.lock = threading.Lock()

    def callback(self, sent_s: float) -> Callable[[Future[PartitionOffset]], None]:
        def done(future: Future[PartitionOffset]) -> None:
            if future.exception() is None:
                with self.lock:
                    self.latencies_s.append(time.monotonic() - sent_s)

        return done

    def tally(self) -> tuple[int, int, str]:
        """(acknowledged, failed, the last failure), once every future is done."""
        failures = [f.exception(0) for f in self.futures if f.exception(0) is not None]
        last = "" if not failures else f"{type(failures[-1]).__name__}: {failures[-1]}"
        return len(self.futures) - len(failures), len(failures), last[:160]


def measure(
    lb: str, api_key: str, topic: str, seconds: float, limits: ClientLimits | None = None
) -> Row:
    """``limits``: the library's defaults unless given (to try other bounds by hand)."""
    counts = _Counts()
    with AsyncProducer(lb, topic, api_key=api_key, limits=limits) as producer:
        started_s = time.monotonic()
        deadline_s = started_s + seconds
        threads = [
            threading.Thread(target=_send_until, args=(producer, deadline_s, counts), daemon=True)
            for _ in range(THREADS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(seconds + JOIN_GRACE_S)
        producer.flush(timeout_s=FLUSH_WAIT_S)
        elapsed_s = time.monotonic() - started_s
    acked, failed, last_error = counts.tally()
    if acked == 0:
        return Row(RAFTQ, SCENARIO, key=KEY, error=f"nothing acknowledged: {last_error}")
    p50 = percentile(counts.latencies_s, 0.50)
    p99 = percentile(counts.latencies_s, 0.99)
    return Row(
        RAFTQ,
        SCENARIO,
        acked / elapsed_s,
        None,
        None if p50 is None else p50 * 1000,
        None if p99 is None else p99 * 1000,
        failed,
        "latency: send returned to ack",
        KEY,
    )


def _send_until(producer: AsyncProducer, deadline_s: float, counts: _Counts) -> None:
    futures: list[Future[PartitionOffset]] = []
    while time.monotonic() < deadline_s:
        future = producer.send(VALUE)
        if len(futures) % LATENCY_SAMPLE_EVERY == 0:
            # From when send returned (a wait for room in the buffer not counted), as the
            # NATS row times from when publish_async returned.
            future.add_done_callback(counts.callback(time.monotonic()))
        futures.append(future)
    with counts.lock:
        counts.futures += futures
