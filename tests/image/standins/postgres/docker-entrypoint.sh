#!/usr/bin/env bash
# The official postgres image's start-up, the part deploy/compose.yaml relies on (see the Dockerfile).
set -Eeuo pipefail

# NAME_FILE in place of NAME (a secret mounted as a file), read while still root as the official
# image does: the file need not be readable by the postgres user.
file_env() {
    local name=$1 file_name="${1}_FILE"
    if [[ -n ${!file_name:-} ]]; then
        if [[ -n ${!name:-} ]]; then
            echo "postgres: both $name and $file_name are set; give one" >&2
            exit 1
        fi
        export "$name"="$(<"${!file_name}")"
        unset "$file_name"
    fi
}

if [[ ${1:-} == -* ]]; then
    set -- postgres "$@"
fi
if [[ ${1:-} != postgres ]]; then
    exec "$@"
fi

file_env POSTGRES_PASSWORD
file_env POSTGRES_USER
file_env POSTGRES_DB
export POSTGRES_USER=${POSTGRES_USER:-postgres}
export POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}

if [[ $(id -u) == 0 ]]; then
    # A fresh volume may belong to root: hand it to postgres, then run this again as postgres.
    mkdir -p "$PGDATA" /var/run/postgresql
    chown postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 0700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

if [[ ! -s $PGDATA/PG_VERSION ]]; then
    if [[ -z ${POSTGRES_PASSWORD:-} ]]; then
        echo "postgres: the database is not initialised and POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE) is not set" >&2
        exit 1
    fi
    initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
        --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 -D "$PGDATA" >/dev/null
    printf '\nhost all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
    # The database, made by a server on the local socket alone: no TCP client (nor the compose
    # health check, which asks over TCP) sees it before it is ready.
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w -s start
    if [[ $POSTGRES_DB != postgres ]]; then
        psql -v ON_ERROR_STOP=1 -q --username "$POSTGRES_USER" --dbname postgres \
            --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
    fi
    pg_ctl -D "$PGDATA" -m fast -w -s stop
    echo "postgres: initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
unset POSTGRES_PASSWORD

shift
postgres -c listen_addresses='*' "$@" &
pid=$!
# SIGTERM (and SIGINT) become SIGINT, PostgreSQL's fast shutdown: clients are disconnected, not
# waited for.
trap 'kill -INT "$pid" 2>/dev/null || true' TERM INT
status=0
while kill -0 "$pid" 2>/dev/null; do
    wait "$pid" && status=0 || status=$?
done
exit "$status"
