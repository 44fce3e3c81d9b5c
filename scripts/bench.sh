#!/usr/bin/env bash
# Runs the benchmark with its peers, installing what is missing first:
#   - .venv and RaftQ (scripts/setup.sh);
#   - nats-server and rabbitmq-server (Debian packages, with apt-get, when run as root or with
#     sudo; without them the benchmark says which peer it could not run and goes on);
#   - nats-py and pika (requirements-bench.txt) into .venv.
# Then: python -m stress_tests.benchmark --peers "$@" (arguments are forwarded, e.g.
#   ./scripts/bench.sh --seconds 3 --backlog 5000000).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
log() { echo "bench: $*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else return 1; fi
}

have_peer_binaries() {
    { command -v nats-server || [ -x /usr/sbin/nats-server ]; } >/dev/null 2>&1 \
        && [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]
}

ensure_peer_binaries() {
    if have_peer_binaries; then
        return
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        log "nats-server or rabbitmq-server missing and apt-get not available: those peers will be skipped"
        return
    fi
    log "installing nats-server and rabbitmq-server (apt-get)"
    # The packages' own services are not wanted: the benchmark starts its own clusters on
    # other ports, so policy-rc.d keeps apt from starting the system ones.
    local policy=/usr/sbin/policy-rc.d created_policy=0
    if [ ! -e "$policy" ] && as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy"; then
        created_policy=1
    fi
    as_root apt-get update -q || log "apt-get update failed"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q nats-server rabbitmq-server \
        || log "apt-get install failed: the missing peers will be skipped"
    if [ "$created_policy" -eq 1 ]; then as_root rm -f "$policy"; fi
}

ensure_python_clients() {
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r requirements-bench.txt
}

./scripts/setup.sh >&2
ensure_peer_binaries
ensure_python_clients
exec "$VENV/bin/python" -m stress_tests.benchmark --peers "$@"
