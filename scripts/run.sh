#!/usr/bin/env bash
# Serves the gateway embedded: the server (Daphne, gateway_project/serve.py) and one Celery worker,
# after `manage.py prepare` (migrations, the first admin, the static files when they changed). The
# worker runs its tasks one at a time (solo pool), with beat and the audit ingest as threads of it
# (gateway_project/celery.py): the server appends each request's entry to the spool, the worker
# writes the spool to the database. Two Python processes beside this shell (docs/benchmarks.md,
# "Memory"); the production layout is in README.md.
#
# SIGTERM or SIGINT (Ctrl-C, `docker stop`, `kill`) stops it all and exits 0: the server first (it
# drains its requests for up to GATEWAY_SHUTDOWN_GRACE_SECONDS and seals its spool), then the worker
# (it finishes its task and writes what is left on the spool). Both run in the background so that
# the shell, waiting in `wait`, runs its trap at once: bash runs no trap while a foreground child runs.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${GATEWAY_BIN_DIR:-.venv/bin}
DATA_DIR=${GATEWAY_DATA_DIR:-.gateway}
mkdir -p "$DATA_DIR"
# GATEWAY_LOG_FORMAT=json: every line is a JSON object, what is printed rather than logged included.
as_log() {
    if [[ ${GATEWAY_LOG_FORMAT:-text} == json ]]; then "$BIN/python" -m gateway_project.json_lines "$1"; else cat; fi
}
# Its report (the first owner and a generated password, on the first run only) is kept for the
# banner below; its errors go to stderr at once, and stop the script.
report=$("$BIN/python" manage.py prepare)

server="" worker="" banner="" stopping=""
stop() {
    stopping=1
    trap '' INT TERM  # a second Ctrl-C does not cut the drain short
    if [[ -n $banner ]]; then
        kill "$banner" 2>/dev/null || true
        wait "$banner" 2>/dev/null || true
    fi
    if [[ -n $server ]]; then
        kill -TERM "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    if [[ -n $worker ]]; then
        kill -TERM "$worker" 2>/dev/null || true
        wait "$worker" 2>/dev/null || true
    fi
}
trap 'stop; exit 0' INT TERM
trap 'if [[ -z $stopping ]]; then stop; fi' EXIT

# At a lower CPU priority: on a laptop the requests come first, the log and the tasks after.
# Named by its process id too: two nodes of one deployment on one host stay two workers to the broker.
# --quiet: no Celery banner (36 lines that pushed the address off the screen); its logs still show.
nice -n 10 "$BIN/celery" -A gateway_project --quiet worker --beat-thread --pool solo \
    --hostname "gateway-$$@%h" \
    --schedule "$DATA_DIR/celerybeat-schedule" --loglevel "${CELERY_LOG_LEVEL:-WARNING}" \
    > >(as_log gateway.worker) &  # what Celery prints (not logs) as it stops
worker=$!

# Daphne is not told to read forwarded headers (it would believe X-Forwarded-For from anyone); the
# gateway reads them from GATEWAY_TRUSTED_PROXIES only (gateway_project/client_address.py).
# WEB_CONCURRENCY=N (N > 1, with REDIS_URL): N server processes on the one port, under a supervisor
# (gateway_project/server_processes.py) that passes SIGTERM on; with 1, the server itself.
"$BIN/python" -m gateway_project.server_processes -b "${HOST:-127.0.0.1}" -p "${PORT:-8000}" \
    gateway_project.asgi:application &
server=$!

# One banner, once the server listens (it does once its application is loaded): the address to open,
# and what the first run made. Bash alone polls the port, so nothing of it outlives a stop.
banner() {
    local url="http://${HOST:-127.0.0.1}:${PORT:-8000}" probe=${HOST:-127.0.0.1} tries=600
    [[ $probe == 0.0.0.0 || $probe == :: ]] && probe=127.0.0.1
    until (exec 3<>"/dev/tcp/$probe/${PORT:-8000}") 2>/dev/null; do
        ((--tries > 0)) || return 0
        sleep 0.2
    done
    {
        echo ""
        echo "  The gateway is ready: $url/console/"
        [[ -n $report ]] && sed 's/^/  /' <<<"$report"
        echo "  OpenAI-compatible API: $url/v1   API docs: $url/api/v1/docs"
        echo "  Ctrl-C stops it."
        echo ""
    } | as_log gateway.run
}
banner &
banner=$!

# Either one ending on its own (a crash, a port in use) stops the other; the status is the first's.
status=0
wait -n "$server" "$worker" || status=$?
stop
exit "$status"
