#!/usr/bin/env bash
# Starts (or restarts) a local RaftQ cluster in ${RAFTQ_DIR:-.cluster}: 3 managers, 3 brokers
# and a load balancer, detached. Extra arguments go to `raftq cluster up`, e.g.
#   scripts/cluster.sh --db-url postgresql://raftq:raftq@127.0.0.1:5432/raftq
# Stop it with: .venv/bin/raftq cluster down --dir "${RAFTQ_DIR:-.cluster}"
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh cluster  # only what a cluster needs; the test command adds the rest
exec .venv/bin/raftq cluster up --dir "${RAFTQ_DIR:-.cluster}" "$@"
