#!/usr/bin/env bash
# Serves the gateway embedded: Daphne in the foreground and one Celery worker in the background.
# The worker runs its tasks one at a time (solo pool), beat beside it (-B), and the audit ingest as a
# thread (apps/outbox/worker.py): Daphne appends each request's entry to the spool, the worker writes
# the spool to the database. Three processes, about 330 MiB resident when idle (docs/benchmarks.md,
# "Memory"); the production layout is in README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
DATA_DIR=${GATEWAY_DATA_DIR:-.gateway}
mkdir -p "$DATA_DIR"

# At a lower CPU priority: on a laptop the requests come first, the log and the tasks after.
nice -n 10 "$BIN/celery" -A gateway_project worker -B --pool solo \
    --schedule "$DATA_DIR/celerybeat-schedule" --loglevel "${CELERY_LOG_LEVEL:-WARNING}" &
worker=$!
trap 'kill -TERM "$worker" 2>/dev/null || true; wait 2>/dev/null || true' EXIT INT TERM

echo "Gateway on http://${HOST:-127.0.0.1}:${PORT:-8000}/ (admin console at /admin/, API docs at /api/v1/docs)"
# Daphne is not told to read forwarded headers (it would believe X-Forwarded-For from anyone); the
# gateway reads them from GATEWAY_TRUSTED_PROXIES only (gateway_project/client_address.py).
"$BIN/daphne" -b "${HOST:-127.0.0.1}" -p "${PORT:-8000}" gateway_project.asgi:application
