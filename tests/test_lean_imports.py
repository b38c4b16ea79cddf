"""What a fresh server process has loaded once it has started and answered a proxied request and
both probes: none of the modules only other parts of the gateway need. They load on first use, in
the processes that use them (docs/benchmarks.md, "Issue 23"). Deterministic: a list of modules,
never a time or a size."""

import json
import os
import subprocess
import sys
from pathlib import Path

# Each name stands for the module and everything under it.
NOT_AT_START = (
    "numpy",  # the semantic cache (L3), on its first search or fill
    "scipy",  # the experiments' results
    "celery",  # the worker, beat, and a server sending its first task
    "kombu",
    "onelogin",  # SAML sign-in: python3-saml, lxml, xmlsec
    "lxml",
    "xmlsec",
    "fido2",  # two-factor pages
    "dns",  # single sign-on's domain checks
    "httpx",  # webhook deliveries
    "rest_framework.serializers",  # the management API and the services' writes
    "drf_spectacular.openapi",
    "yaml",
    "pygments",
    "gateway_project.urls",  # the management API, the admin and the console
    "apps.console.access",
    "apps.console.views",
    "apps.console.consumers",  # the live tail's WebSocket, on the first one
)

PROBE = """
import asyncio, json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
import daphne.server  # what gateway_project/serve.py imports before the application
from gateway_project.asgi import application

async def request(path):
    sent = []
    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
             "query_string": b"", "headers": [], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
             "scheme": "http", "http_version": "1.1", "asgi": {"version": "3.0"}}
    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}
    async def send(message):
        sent.append(message)
    await application(scope, receive, send)
    return sent[0]["status"]

statuses = [asyncio.run(request(path)) for path in ("/v1/models", "/healthz", "/readyz")]
print(json.dumps({"statuses": statuses, "modules": sorted(sys.modules)}))
"""


def test_a_fresh_server_process_has_not_loaded_what_only_other_parts_need(tmp_path):
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "GATEWAY_OUTBOX_DIR": str(tmp_path / "outbox")}
    finished = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    report = json.loads(finished.stdout.strip().splitlines()[-1])

    # The proxy answered (no key), and so did both probes: their whole start-up paths ran.
    assert report["statuses"][:2] == [401, 200]
    assert report["statuses"][2] in (200, 503)  # ready, or a part of this machine's set-up is not
    loaded = [
        name
        for name in report["modules"]
        if any(name == heavy or name.startswith(heavy + ".") for heavy in NOT_AT_START)
    ]
    assert not loaded, loaded
