"""A tiny stand-in for a broker, in a thread of the test process: it hosts replica specs and
keeps one in-memory log per partition shared by every fake broker (as if replicated), with
produce de-duplication per ``(producer_id, sequence)`` and pops idempotent per request id."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from protocol.access import Action
from protocol.limits import Limits
from runtime.http_api import App, json_response, request_params, server_limits
from runtime.http_server import HttpRequest, HttpResponse, HttpServer

Key = tuple[str, int]


@dataclass
class SharedLogs:
    lock: threading.Lock = field(default_factory=threading.Lock)
    messages: dict[Key, list[dict[str, object]]] = field(default_factory=dict)
    produced: dict[tuple[Key, str, int], list[int]] = field(default_factory=dict)
    consumer_offsets: dict[tuple[Key, str], int] = field(default_factory=dict)
    pops: dict[tuple[Key, str, str], list[dict[str, object]]] = field(default_factory=dict)

    def append(self, key: Key, body: dict[str, object]) -> list[int]:
        with self.lock:
            dedupe = None
            if body.get("sequence", Action.OPEN) is not None:
                dedupe = (key, str(body["producer_id"]), int(str(body["sequence"])))
                if dedupe in self.produced:
                    return self.produced[dedupe]
            log = self.messages.setdefault(key, [])
            offsets = []
            items = body["messages"]
            assert isinstance(items, list)
            for item in items:
                offset = len(log)
                log.append(
                    {
                        "topic": key[0],
                        "partition_id": key[1],
                        "offset": offset,
                        "key": item.get("key"),
                        "message": item["message"],
                        "headers": item.get("headers", {}),
                        "timestamp_ms": 1,
                    }
                )
                offsets.append(offset)
            if dedupe is not None:
                self.produced[dedupe] = offsets
            return offsets

    def pop(self, key: Key, consumer: str, request_id: str, count: int) -> list[dict[str, object]]:
        with self.lock:
            seen = self.pops.get((key, consumer, request_id))
            if seen is not None:
                return seen
            start = self.consumer_offsets.get((key, consumer), 0)
            found = self.messages.get(key, [])[start : start + count]
            self.consumer_offsets[(key, consumer)] = start + len(found)
            self.pops[(key, consumer, request_id)] = found
            return found


class FakeBroker:
    def __init__(self, broker_id: int, logs: SharedLogs) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self.specs: dict[Key, dict[str, object]] = {}
        limits = Limits()
        self._server = HttpServer("127.0.0.1", 0, self._app(limits).handle, server_limits(limits))
        self.address = f"http://127.0.0.1:{self._server.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join()

    def _app(self, limits: Limits) -> App:
        app = App(f"fake-broker-{self.broker_id}", limits)

        @app.get("/partitions", Action.OPEN)
        def hosted(_http: HttpRequest) -> HttpResponse:
            partitions = [
                {"topic": t, "partition_id": p, "is_leader": spec["replica_id"] == 0}
                for (t, p), spec in list(self.specs.items())
            ]
            return json_response({"broker_id": self.broker_id, "partitions": partitions})

        @app.post("/partitions", Action.OPEN)
        def host(http: HttpRequest) -> HttpResponse:
            spec = request_params(http)
            key = (str(spec["topic"]), int(str(spec["partition_id"])))
            status = 200 if self.specs.get(key) == spec else 201
            self.specs[key] = spec
            return json_response({}, status)

        @app.post("/logs", Action.OPEN)
        def produce(http: HttpRequest) -> HttpResponse:
            body = request_params(http)
            key = (str(body["topic"]), int(str(body["partition_id"])))
            offsets = self.logs.append(key, body)
            return json_response({"partition_id": key[1], "offsets": offsets}, 201)

        @app.get("/logs", Action.OPEN)
        def read(http: HttpRequest) -> HttpResponse:
            args = http.args()
            key = (args["topic"], int(args["partition_id"]))
            count = int(args["max_messages"])
            if "consumer_id" in args:
                found = self.logs.pop(key, args["consumer_id"], args["request_id"], count)
            else:
                start = int(args["offset"])
                with self.logs.lock:
                    found = self.logs.messages.get(key, [])[start : start + count]
            return json_response({"messages": found})

        return app
