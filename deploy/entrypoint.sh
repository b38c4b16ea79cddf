#!/usr/bin/env bash
# The image's entrypoint: its command's first word is the role (docs/deployment.md, "The image").
#
#   server        the proxy, the management API and the console: WEB_CONCURRENCY Daphne processes on
#                 $HOST:$PORT (0.0.0.0:8000), draining on SIGTERM, each writing the spool
#   worker        a Celery worker (background tasks; it also ingests this container's spool)
#   beat          Celery beat: run one (several may start: only the lease holder sends, gateway_project/beat.py)
#   ingest        writes the spool of the servers beside it to the database (same GATEWAY_OUTBOX_DIR)
#   migrate       the database's migrations, then the first organization and admin when there is none
#   manage ...    any manage.py command
#   healthcheck   the image's HEALTHCHECK: a server answers /healthz; another role's process is alive
#   anything else runs as given (a shell, say)
#
# Configuration is the environment only; every secret may come as NAME_FILE (gateway_project/env.py).
# Each role is `exec`ed: it is the container's process 1 and receives the stop signal itself.
set -euo pipefail
cd /opt/gateway/app

requires() {
    local name
    for name in "$@"; do
        if [[ -z ${!name:-} && -z $(printenv "${name}_FILE" || true) ]]; then
            echo "gateway: the $role role needs $name (or ${name}_FILE); docs/deployment.md lists the settings" >&2
            exit 2
        fi
    done
}

role=${1:-server}
[[ $# -gt 0 ]] && shift
# Celery's banner is text: with JSON logs (the image's default) only its log lines are printed.
celery_quiet=()
[[ ${GATEWAY_LOG_FORMAT:-text} == json ]] && celery_quiet=(--quiet)
case $role in
    server)
        # A container has its own database and secret only by mistake: refuse rather than start one
        # that loses what it holds with its container (and differs from its replicas).
        requires DATABASE_URL SECRET_KEY
        exec python -m gateway_project.server_processes -b "${HOST:-0.0.0.0}" -p "${PORT:-8000}" \
            "$@" gateway_project.asgi:application
        ;;
    worker)
        requires DATABASE_URL SECRET_KEY
        # A name of its own on the broker, even beside another worker on one host's network.
        exec celery -A gateway_project "${celery_quiet[@]}" worker --loglevel "${CELERY_LOG_LEVEL:-INFO}" \
            --concurrency "${CELERY_CONCURRENCY:-2}" \
            --hostname "${CELERY_WORKER_NAME:-gateway-$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')@%h}" "$@"
        ;;
    beat)
        requires DATABASE_URL SECRET_KEY
        exec celery -A gateway_project "${celery_quiet[@]}" beat --loglevel "${CELERY_LOG_LEVEL:-INFO}" \
            --schedule "${GATEWAY_DATA_DIR}/celerybeat-schedule" "$@"
        ;;
    ingest)
        requires DATABASE_URL SECRET_KEY
        exec python manage.py outbox_ingest "$@"
        ;;
    migrate)
        requires DATABASE_URL SECRET_KEY
        # prepare: one at a time across every node (a lock in PostgreSQL); the static files are the image's.
        exec python manage.py prepare --no-static "$@"
        ;;
    manage)
        exec python manage.py "$@"
        ;;
    healthcheck)
        # Process 1 is the role (each is exec'ed): only a server has /healthz to ask.
        if tr '\0' ' ' < /proc/1/cmdline | grep -q 'gateway_project\.server_processes\|gateway_project\.serve'; then
            exec python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:${PORT:-8000}/healthz', timeout=2)"
        fi
        kill -0 1
        ;;
    *)
        exec "$role" "$@"
        ;;
esac
