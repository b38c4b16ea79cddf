"""What a fresh server process has loaded once it has started and answered a proxied request: none of
the heavy modules that only some organizations' features need (they load on first use, in the
processes that use them). Deterministic: a list of modules, never a time or a size."""

import json
import os
import subprocess
import sys
from pathlib import Path

# Loaded only where used: NumPy by the semantic cache (L3) on its first search or fill.
NOT_AT_START = ("numpy",)

PROBE = """
import asyncio, json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
import django
django.setup()
from gateway_project.asgi import application

async def request():
    sent = []
    scope = {"type": "http", "method": "GET", "path": "/v1/models", "raw_path": b"/v1/models",
             "query_string": b"", "headers": [], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
             "scheme": "http", "http_version": "1.1", "asgi": {"version": "3.0"}}
    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}
    async def send(message):
        sent.append(message)
    await application(scope, receive, send)
    return sent[0]["status"]

status = asyncio.run(request())
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def test_a_fresh_server_process_has_not_loaded_the_heavy_optional_modules():
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    finished = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    report = json.loads(finished.stdout.strip().splitlines()[-1])

    assert report["status"] == 401  # the proxy answered (no key): its whole start-up path ran
    loaded = {name.split(".")[0] for name in report["modules"]}
    assert not loaded & set(NOT_AT_START), sorted(loaded & set(NOT_AT_START))
