"""One ``FlushPool`` for the in-process broker tests that build ``HostedReplica`` by hand, as
a broker process has one for all its replicas (started on first use; its daemon threads
outlive the tests, and each service's ``close`` takes its replicas out of it)."""

from __future__ import annotations

import functools

from broker.persistence.flush_pool import FlushPool


@functools.cache
def shared_flush_pool() -> FlushPool:
    pool = FlushPool(threads=2, error_pause_s=0.05, name="test flush")
    pool.start()
    return pool
