"""A stand-in for a manager, broker or load balancer process in LocalCluster tests.

Copied into a temporary directory as ``<role>/__main__.py`` so that ``python -m <role>`` runs
it. It serves just enough HTTP for ``LocalCluster.up``/``status``, and starts a sleeping child
in its process group, to check that the whole group is signalled.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, required=True, help="the node file")
    known, _ = parser.parse_known_args()
    node = tomllib.loads(known.config.read_text())
    args = argparse.Namespace(host=node["host"], port=node["port"], data_dir=node.get("data_dir"))
    if args.data_dir and (Path(args.data_dir) / "fail-on-start").exists():
        print("stand-in: failing on purpose", flush=True)
        sys.exit(3)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if args.data_dir:
        Path(args.data_dir, "worker.pid").write_text(str(child.pid))
    lb_url = f"http://{args.host}:{args.port}"
    brokers = [{"broker_id": i, "address": "x", "alive": True, "partitions": 0} for i in (1, 2, 3)]
    answers = {
        "/": {"status": "ok"},
        "/brokers": {"brokers": brokers},
        "/raft_status": {"leader_address": lb_url, "managers": []},
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(answers.get(self.path, {})).encode()
            self.send_response(200 if self.path in answers else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            # ``cluster up`` asks the manager leader for an admin key, signed as a node.
            made = self.path == "/keys" and self.headers.get("X-RaftQ-Node-Auth") is not None
            body = json.dumps({"key": "rq_standin_admin_key"} if made else {}).encode()
            self.send_response(201 if made else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
