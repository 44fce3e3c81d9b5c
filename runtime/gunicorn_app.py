"""Runs a Flask app under gunicorn, built inside the worker after the fork.

A pysyncobj ``SyncObj`` starts threads and sockets, which do not survive ``fork()``: the app
factory therefore runs in ``load()``, which gunicorn calls in the worker (never with
``preload_app``). Workers are never recycled (``max_requests = 0``): a new worker would start a
second Raft node on the same address.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication


class _Application(BaseApplication):  # type: ignore[misc]
    def __init__(self, factory: Callable[[], Flask], options: dict[str, Any]) -> None:
        self._factory = factory
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return self._factory()


def serve(
    factory: Callable[[], Flask],
    *,
    host: str,
    port: int,
    threads: int,
    workers: int = 1,
    timeout_s: int = 60,
    name: str = "raftq",
) -> None:
    """Serve forever; returns when gunicorn stops (SIGTERM/SIGINT)."""
    options: dict[str, Any] = {
        "bind": f"{host}:{port}",
        "workers": workers,
        "worker_class": "gthread",
        "threads": threads,
        "preload_app": False,
        "max_requests": 0,
        "timeout": timeout_s,
        "graceful_timeout": 5,
        "keepalive": 30,
        "proc_name": name,
        "accesslog": None,
        "loglevel": "warning",
    }
    _Application(factory, options).run()
