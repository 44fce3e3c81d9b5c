#!/usr/bin/env bash
# Sets up the development environment, idempotently:
#   - python3 (>= 3.11) with venv and pip (on Debian, installed with apt-get when missing);
#   - a Java runtime for PySpark (spark_jobs/; on Debian, default-jre-headless when `java`
#     is missing);
#   - libfuse 2 and fusermount for the power-cut file system (stress_tests/powercut, fusepy;
#     on Debian, libfuse2 and fuse3 when either is missing);
#   - chromium, headless, for the dashboard's test (on Debian, when `chromium` is missing);
#   - .venv in the repository root;
#   - requirements-dev.txt and RaftQ itself (editable) installed into it, again only when
#     requirements*.txt or pyproject.toml changed (a hash of them is kept in .venv).
# Afterwards .venv/bin/raftq exists.
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

ensure_python() {
    if ! python_usable; then
        command -v apt-get >/dev/null 2>&1 \
            || die "$PYTHON with venv and ensurepip is missing and apt-get is not available"
        log "installing python3 with venv and pip (apt-get)"
        as_root apt-get update
        as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y python3 python3-venv python3-pip python3-dev
        python_usable || die "$PYTHON still lacks venv or ensurepip after apt-get install"
    fi
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "RaftQ needs Python >= 3.11; $PYTHON is $("$PYTHON" --version 2>&1)"
    log "using $("$PYTHON" --version 2>&1) ($(command -v "$PYTHON"))"
}

ensure_java() {
    if command -v java >/dev/null 2>&1; then
        return
    fi
    command -v apt-get >/dev/null 2>&1 \
        || die "java (17 or newer, for PySpark) is missing and apt-get is not available"
    log "installing a Java runtime for PySpark (apt-get)"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y default-jre-headless
    command -v java >/dev/null 2>&1 || die "java still missing after apt-get install"
}

libfuse_usable() {
    # What fusepy itself looks up: ctypes.util.find_library("fuse") (libfuse.so.2).
    "$PYTHON" -c 'import ctypes.util, sys; sys.exit(ctypes.util.find_library("fuse") is None)' \
        && command -v fusermount >/dev/null 2>&1
}

ensure_libfuse() {
    if libfuse_usable; then
        return
    fi
    command -v apt-get >/dev/null 2>&1 \
        || die "libfuse 2 or fusermount (for stress_tests/powercut) is missing and apt-get is not available"
    log "installing libfuse2 and fuse3 for the power-cut file system (apt-get)"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y libfuse2 fuse3
    libfuse_usable || die "libfuse 2 or fusermount still missing after apt-get install"
}

ensure_chromium() {
    # Headless Chromium loads the load balancer's dashboard in its test.
    if command -v chromium >/dev/null 2>&1; then
        return
    fi
    command -v apt-get >/dev/null 2>&1 \
        || die "chromium (for the dashboard's test) is missing and apt-get is not available"
    log "installing chromium for the dashboard's test (apt-get)"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
    command -v chromium >/dev/null 2>&1 || die "chromium still missing after apt-get install"
}

ensure_venv() {
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import sys" >/dev/null 2>&1; then
        return
    fi
    log "creating $VENV"
    "$PYTHON" -m venv "$VENV"
}

inputs_hash() {
    cat requirements*.txt pyproject.toml | sha256sum | cut -d' ' -f1
}

ensure_packages() {
    local wanted
    wanted="$(inputs_hash)"
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ] && [ -x "$VENV/bin/raftq" ]; then
        log "dependencies up to date"
        return
    fi
    log "installing requirements-dev.txt and RaftQ (editable)"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r requirements-dev.txt
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -e . --no-deps
    echo "$wanted" > "$STAMP"
}

ensure_python
ensure_java
ensure_libfuse
ensure_chromium
ensure_venv
ensure_packages
[ -x "$VENV/bin/raftq" ] || die "$VENV/bin/raftq is missing after installation"
log "ready: $VENV/bin/raftq"
