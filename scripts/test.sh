#!/usr/bin/env bash
# The README's test command: set up (idempotent), make sure PostgreSQL runs, then every check
# that decides whether work lands: lint, format, types, import layering, and the test suite
# (unit, store, and real-process cluster tests on SQLite and PostgreSQL).
# Extra arguments go to pytest, e.g. scripts/test.sh -k partition_log
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash install_db.sh

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"
.venv/bin/mypy
echo "== import layering"
.venv/bin/lint-imports
echo "== pytest"
.venv/bin/python -m pytest --durations=25 "$@"
