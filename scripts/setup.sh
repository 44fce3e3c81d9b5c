#!/usr/bin/env bash
# Sets up the development environment, idempotently:
#   - python3 (>= 3.11) with venv and pip (on Debian, installed with apt-get when missing;
#     every Debian package below the same way, with one `apt-get update` per run);
#   - a Java runtime for PySpark (spark_jobs/; on Debian, default-jre-headless when `java`
#     is missing);
#   - libfuse 2 and fusermount for the power-cut file system (stress_tests/powercut, fusepy;
#     on Debian, libfuse2 and fuse3 when either is missing), and the /dev/fuse device (as
#     root: modprobe fuse, else mknod; the power-loss tests fail without it unless
#     RAFTQ_ALLOW_SKIPS=1);
#   - chromium, headless, for the dashboard's test (on Debian, when `chromium` is missing);
#   - iptables, as root, for the network-partition faults (stress_tests/network_partition.py;
#     a test that needs them installs it itself otherwise, within a short bound);
#   - .venv in the repository root;
#   - requirements-dev.txt and RaftQ itself, both distributions (the client at the root, the
#     server in server/), editable, installed into it, again only when a requirements file or
#     a pyproject.toml changed (a hash of them is kept in .venv).
# Afterwards .venv/bin/raftq exists.
#
# `scripts/setup.sh cluster` (what scripts/cluster.sh runs) sets up only what a local cluster
# needs: python3, .venv, requirements.txt and RaftQ; no Java, FUSE, chromium, iptables, test
# or Spark tooling (the test command installs those).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv
STAMP="$VENV/.raftq-install-stamp"

log() { echo "setup: $*"; }
die() { echo "setup: error: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

python_usable() {
    command -v "$PYTHON" >/dev/null 2>&1 \
        && "$PYTHON" -c "import ensurepip, venv" >/dev/null 2>&1
}

APT_UPDATED=no

apt_install() {
    # apt_install WHAT PACKAGE...: installs Debian packages for WHAT (one `apt-get update` per
    # run, before the first install).
    local what="$1"
    shift
    command -v apt-get >/dev/null 2>&1 \
        || die "$what is missing and apt-get is not available: install $* by hand"
    log "installing $* for $what (apt-get)"
    if [ "$APT_UPDATED" = no ]; then
        as_root apt-get update
        APT_UPDATED=yes
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}

ensure() {
    # ensure WHAT CHECK PACKAGE...: when the command CHECK fails, installs the packages and
    # checks again.
    local what="$1" check="$2"
    shift 2
    if "$check"; then
        return
    fi
    apt_install "$what" "$@"
    "$check" || die "$what still missing after apt-get install"
}

java_usable() { command -v java >/dev/null 2>&1; }

libfuse_usable() {
    # What fusepy itself looks up: ctypes.util.find_library("fuse") (libfuse.so.2).
    "$PYTHON" -c 'import ctypes.util, sys; sys.exit(ctypes.util.find_library("fuse") is None)' \
        && command -v fusermount >/dev/null 2>&1
}

ensure_fuse_device() {
    # libfuse alone is not enough: the kernel's device must be there too. A container may
    # lack it; as root, load the module or make the node (10, 229 is FUSE's fixed number).
    if [ -c /dev/fuse ]; then
        return
    fi
    if [ "$(id -u)" -eq 0 ]; then
        modprobe fuse >/dev/null 2>&1 || true
        [ -c /dev/fuse ] || mknod -m 0666 /dev/fuse c 10 229 >/dev/null 2>&1 || true
    fi
    if [ -c /dev/fuse ]; then
        log "made /dev/fuse"
    else
        log "warning: no /dev/fuse (a container needs --device /dev/fuse): the power-loss" \
            "tests will fail (RAFTQ_ALLOW_SKIPS=1 skips them)"
    fi
}

chromium_usable() { command -v chromium >/dev/null 2>&1; }
iptables_usable() {
    # Only root makes network partitions (stress_tests/network_partition.py); others skip it.
    [ "$(id -u)" -ne 0 ] || command -v iptables >/dev/null 2>&1
}

ensure_python() {
    ensure "$PYTHON with venv and pip" python_usable \
        python3 python3-venv python3-pip python3-dev
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "RaftQ needs Python >= 3.11; $PYTHON is $("$PYTHON" --version 2>&1)"
    log "using $("$PYTHON" --version 2>&1) ($(command -v "$PYTHON"))"
}

ensure_venv() {
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import sys" >/dev/null 2>&1; then
        return
    fi
    log "creating $VENV"
    "$PYTHON" -m venv "$VENV"
}

inputs_hash() {
    cat requirements*.txt server/requirements*.txt pyproject.toml server/pyproject.toml \
        | sha256sum | cut -d' ' -f1
}

CLUSTER_STAMP="$VENV/.raftq-cluster-stamp"

cluster_inputs_hash() {
    cat requirements.txt requirements-client.txt server/requirements*.txt pyproject.toml \
        server/pyproject.toml | sha256sum | cut -d' ' -f1
}

installed() {
    # installed STAMP HASH: the packages behind HASH are in .venv already.
    [ -f "$1" ] && [ "$(cat "$1")" = "$2" ] && [ -x "$VENV/bin/raftq" ]
}

ensure_packages() {
    # ensure_packages REQUIREMENTS STAMP HASH
    local requirements="$1" stamp="$2" wanted="$3"
    if installed "$stamp" "$wanted"; then
        log "dependencies up to date"
        return
    fi
    log "installing $requirements and RaftQ, client and server (editable)"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$requirements"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-deps -e . -e ./server
    echo "$wanted" > "$stamp"
}

EXECUTOR_VENV=.venv-spark-executor
EXECUTOR_STAMP="$EXECUTOR_VENV/.raftq-install-stamp"

# A Python as a Spark cluster's executors have it: the client's and the data source's
# third-party packages, not RaftQ (the Spark standalone test ships RaftQ with --py-files).
ensure_executor_venv() {
    local wanted
    wanted="$(cat requirements-client.txt requirements-spark-executor.txt | sha256sum)"
    if [ -f "$EXECUTOR_STAMP" ] && [ "$(cat "$EXECUTOR_STAMP")" = "$wanted" ]; then
        return
    fi
    log "creating $EXECUTOR_VENV (a Spark executor's Python, without RaftQ)"
    rm -rf "$EXECUTOR_VENV"
    "$PYTHON" -m venv "$EXECUTOR_VENV"
    "$EXECUTOR_VENV/bin/python" -m pip install --disable-pip-version-check -q \
        -r requirements-client.txt -r requirements-spark-executor.txt
    echo "$wanted" > "$EXECUTOR_STAMP"
}

ensure_python
if [ "${1:-}" = cluster ]; then
    ensure_venv
    # A full setup (requirements-dev.txt includes requirements.txt) serves a cluster too.
    if ! installed "$STAMP" "$(inputs_hash)"; then
        ensure_packages requirements.txt "$CLUSTER_STAMP" "$(cluster_inputs_hash)"
    fi
    log "ready for a cluster: $VENV/bin/raftq"
    exit 0
fi
ensure "a Java runtime (17 or newer, for PySpark)" java_usable default-jre-headless
ensure "libfuse 2 and fusermount (stress_tests/powercut)" libfuse_usable libfuse2 fuse3
ensure_fuse_device
ensure "headless chromium (the dashboard's test)" chromium_usable chromium
ensure "iptables (the network-partition faults)" iptables_usable iptables
ensure_venv
ensure_packages requirements-dev.txt "$STAMP" "$(inputs_hash)"
ensure_executor_venv
[ -x "$VENV/bin/raftq" ] || die "$VENV/bin/raftq is missing after installation"
log "ready: $VENV/bin/raftq"
