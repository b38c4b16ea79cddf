# The gateway's one image: every role (server, worker, beat, ingest, migrate, manage) is its command's
# first word (deploy/entrypoint.sh). docs/deployment.md is the guide.
#
#   podman build -t llm-gateway .            (or docker build)
#   podman run --env-file gateway.env -p 8000:8000 llm-gateway server
#
# BASE_IMAGE: any Debian bookworm with Python 3.11 and its venv module at python3; the official
# python:3.11-slim-bookworm by default (where no registry is reachable, a local one: docs/deployment.md).
ARG BASE_IMAGE=python:3.11-slim-bookworm

# --- Build: the dependencies' wheels into a virtualenv (only what pyproject.toml pins; their test
# suites and pip left out) ---------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/gateway/venv
WORKDIR /src
# The dependencies alone first: this layer is rebuilt when pyproject.toml changes, not the code.
COPY pyproject.toml .
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > requirements.txt \
    && /opt/gateway/venv/bin/pip install --only-binary=:all: -r requirements.txt \
    && find /opt/gateway/venv/lib/python3.11/site-packages/numpy /opt/gateway/venv/lib/python3.11/site-packages/scipy \
        -depth -type d -name tests -exec rm -rf {} + \
    && /opt/gateway/venv/bin/pip uninstall --yes --quiet pip \
    && /opt/gateway/venv/bin/python -m compileall -q /opt/gateway/venv
COPY manage.py README.md ./
COPY apps apps
COPY gateway_project gateway_project
COPY templates templates
COPY static static
# The static files collected once, here: the console and the admin are served from the image
# (WhiteNoise), read-only at run time.
RUN DATA_DIR=$(mktemp -d) && GATEWAY_DATA_DIR=$DATA_DIR STATIC_ROOT=/src/staticfiles \
        /opt/gateway/venv/bin/python manage.py collectstatic --noinput -v 0 \
    && rm -rf "$DATA_DIR" \
    && /opt/gateway/venv/bin/python -m compileall -q apps gateway_project

# --- Runtime: the virtualenv and the code, no compiler, no pip cache, a user without a shell -------
FROM ${BASE_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="llm-gateway" \
      org.opencontainers.image.description="An OpenAI- and Anthropic-compatible LLM gateway on Django" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
# The user and group written directly: the base may have no useradd.
RUN echo "gateway:x:10001:10001:gateway:/var/lib/gateway:/usr/sbin/nologin" >> /etc/passwd \
    && echo "gateway:x:10001:" >> /etc/group \
    && mkdir -p /var/lib/gateway/outbox /tmp/gateway-metrics \
    && chown -R 10001:10001 /var/lib/gateway /tmp/gateway-metrics \
    && chmod 0700 /var/lib/gateway/outbox
COPY --from=build /opt/gateway/venv /opt/gateway/venv
COPY --from=build /src /opt/gateway/app
COPY deploy/entrypoint.sh /usr/local/bin/gateway
ENV PATH=/opt/gateway/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DJANGO_SETTINGS_MODULE=gateway_project.settings \
    GATEWAY_DATA_DIR=/var/lib/gateway \
    GATEWAY_OUTBOX_DIR=/var/lib/gateway/outbox \
    GATEWAY_METRICS_DIR=/tmp/gateway-metrics \
    STATIC_ROOT=/opt/gateway/app/staticfiles \
    GATEWAY_LOG_FORMAT=json \
    PORT=8000
WORKDIR /opt/gateway/app
USER 10001:10001
# The spool: what each answered request leaves until the ingest writes it (keep it on a volume).
VOLUME ["/var/lib/gateway/outbox"]
EXPOSE 8000
# Docker reads this (podman with --format docker); Kubernetes has its own probes (deploy/kubernetes).
# A server answers /healthz; the other roles are healthy while their process runs.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 CMD ["gateway", "healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["gateway"]
CMD ["server"]
