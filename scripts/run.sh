#!/usr/bin/env bash
# Serves the gateway: a Celery worker (with beat) in the background, Daphne in the foreground.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
DATA_DIR=${GATEWAY_DATA_DIR:-.gateway}
mkdir -p "$DATA_DIR"

"$BIN/celery" -A gateway_project worker -B \
    --schedule "$DATA_DIR/celerybeat-schedule" \
    --concurrency "${CELERY_CONCURRENCY:-2}" --loglevel "${CELERY_LOG_LEVEL:-WARNING}" &
worker=$!
# The audit log is written by its own process, so Daphne's CPU goes to requests (docs/benchmarks.md).
export GATEWAY_OUTBOX_DELIVERY=${GATEWAY_OUTBOX_DELIVERY:-ingest_process}
ingest=""
if [ "$GATEWAY_OUTBOX_DELIVERY" = "ingest_process" ]; then
    # Daphne only spools audit entries in this mode; this process writes them to the database.
    "$BIN/python" manage.py outbox_ingest &
    ingest=$!
fi
trap 'kill -TERM "$worker" $ingest 2>/dev/null || true; wait 2>/dev/null || true' EXIT INT TERM

echo "Gateway on http://${HOST:-127.0.0.1}:${PORT:-8000}/ (admin console at /admin/, API docs at /api/v1/docs)"
# Daphne is not told to read forwarded headers (it would believe X-Forwarded-For from anyone); the
# gateway reads them from GATEWAY_TRUSTED_PROXIES only (gateway_project/client_address.py).
"$BIN/daphne" -b "${HOST:-127.0.0.1}" -p "${PORT:-8000}" gateway_project.asgi:application
