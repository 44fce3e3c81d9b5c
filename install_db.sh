#!/usr/bin/env bash
# Installs PostgreSQL from Debian's packages if it is missing, starts it if it is not accepting
# connections on 127.0.0.1:5432, and creates (idempotently) the role raftq (password raftq,
# LOGIN CREATEDB) and the databases raftq_broker_1..3 and raftq_test owned by it.
# Safe to run any number of times; works with trust auth (a dev box) and with the scram
# password auth of a fresh Debian install (the role's password makes the URLs work):
#   postgresql://raftq:raftq@127.0.0.1:5432/raftq_broker_1
set -euo pipefail

HOST=127.0.0.1
PORT=5432
ROLE=raftq
PASSWORD=raftq
DATABASES=(raftq_broker_1 raftq_broker_2 raftq_broker_3 raftq_test)
START_WAIT_S=30

log() { echo "install_db: $*"; }
die() { echo "install_db: error: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

as_postgres() {
    if [ "$(id -un)" = postgres ]; then
        "$@"
    elif [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        sudo -u postgres "$@"
    fi
}

accepting() {
    pg_isready -h "$HOST" -p "$PORT" -q >/dev/null 2>&1
}

server_installed() {
    command -v pg_ctlcluster >/dev/null 2>&1 && command -v psql >/dev/null 2>&1 \
        && compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null
}

install_server() {
    if server_installed; then
        log "PostgreSQL is installed"
        return
    fi
    log "installing PostgreSQL from Debian's packages"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql
    server_installed || die "apt-get installed postgresql but its server binaries are missing"
}

start_server() {
    if accepting; then
        log "PostgreSQL accepts connections on $HOST:$PORT"
        return
    fi
    local version
    # The newest installed server version that has a "main" cluster.
    version="$(pg_lsclusters -h 2>/dev/null | awk '$2 == "main" {print $1}' | sort -V | tail -n 1)"
    if [ -n "$version" ]; then
        log "starting PostgreSQL $version/main"
        as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start \
            || as_root service postgresql start
    else
        log "no 'main' cluster listed; starting the postgresql service"
        as_root service postgresql start
    fi
    local waited=0
    until accepting; do
        [ "$waited" -lt "$START_WAIT_S" ] \
            || die "PostgreSQL does not accept connections on $HOST:$PORT after ${START_WAIT_S}s"
        sleep 1
        waited=$((waited + 1))
    done
    log "PostgreSQL accepts connections on $HOST:$PORT"
}

# psql as the postgres superuser: over the local socket (peer auth on Debian), else over TCP
# (a server set up with trust auth on 127.0.0.1, as on some dev machines).
PSQL_TARGET=()
choose_psql_target() {
    if as_postgres psql -p "$PORT" -X -Atq -c "SELECT 1" >/dev/null 2>&1; then
        PSQL_TARGET=(-p "$PORT")
    elif as_postgres psql -h "$HOST" -p "$PORT" -U postgres -X -Atq -c "SELECT 1" >/dev/null 2>&1
    then
        PSQL_TARGET=(-h "$HOST" -p "$PORT" -U postgres)
    else
        die "cannot connect to PostgreSQL as the postgres user (socket or $HOST:$PORT)"
    fi
}

sql() {
    as_postgres psql "${PSQL_TARGET[@]}" -X -Atq -v ON_ERROR_STOP=1 -d postgres "$@"
}

create_role() {
    # ALTER on an existing role resets the password and rights, so a changed role is repaired.
    sql <<SQL
DO \$\$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
        CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
    ELSE
        ALTER ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
    END IF;
END
\$\$;
SQL
    log "role $ROLE ready"
}

create_database() {
    local name="$1"
    if [ "$(sql -c "SELECT 1 FROM pg_database WHERE datname = '$name'")" = 1 ]; then
        sql -c "ALTER DATABASE $name OWNER TO $ROLE"
        log "database $name exists"
    else
        sql -c "CREATE DATABASE $name OWNER $ROLE"
        log "database $name created"
    fi
}

main() {
    install_server
    start_server
    choose_psql_target
    create_role
    for name in "${DATABASES[@]}"; do
        create_database "$name"
    done
    log "done: postgresql://$ROLE:$PASSWORD@$HOST:$PORT/<database>"
}

main "$@"
