"""The audit writer's throughput: how many entries a second the off-request path can take.

    python -m bench.writer        # run by `make bench` after the request benchmark

Makes ``BENCH_WRITER_ENTRIES`` request records (the proxy's own ``RequestRecord``, bodies kept as
"redacted", the default), then measures the two halves of the path separately, in this process:
the server's half (append each record to the spool as its plain payload, pickled and encrypted, as a
Daphne process does on every request) and the ingest half (prepare the rows, redact the bodies and
write them with their spend rollups, as ``manage.py outbox_ingest`` or a Celery worker does). A throwaway
SQLite database
unless DATABASE_URL is set (its rows are deleted again). Prints a line and rewrites the writer
block of docs/benchmarks.md.
"""

import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- writer:begin -->", "<!-- writer:end -->"


def measure(entries: int) -> dict:
    import django

    django.setup()
    import threading
    import uuid
    from datetime import UTC, datetime
    from decimal import Decimal

    from django.db import connection

    from apps.audit.models import AuditEntry, SpendRollup
    from apps.audit.records import Attempt, RequestRecord
    from apps.catalog.pricing import Usage
    from apps.organizations.models import Organization
    from apps.outbox.ingest import Ingest
    from apps.outbox.outbox import Outbox

    organization = Organization.objects.create(name="Writer bench", slug=f"writer-{secrets.token_hex(4)}")
    # Traffic as an organization sends it: a few keys and provider keys, not a new one per request.
    api_keys = [str(uuid.uuid4()) for _ in range(10)]
    provider_keys = [str(uuid.uuid4()) for _ in range(3)]
    body = b'{"model":"bench-model","messages":[{"role":"user","content":"Write to ada@example.com"}]}'
    records = [
        RequestRecord(
            request_id=str(uuid.uuid4()),
            started_at=datetime.now(UTC),
            endpoint="/v1/chat/completions",
            client_ip="127.0.0.1",
            user_agent="bench",
            organization_id=str(organization.id),
            api_key_id=api_keys[n % len(api_keys)],
            api_key_prefix="sk_live_bench",
            requested_model="bench-model",
            provider="openai",
            provider_key_id=provider_keys[n % len(provider_keys)],
            model="gpt-4o-mini",
            attempts=[Attempt("openai", provider_keys[n % 3], "gpt-4o-mini", "bench-model", 200, "ok", 1.2)],
            cache="miss",
            usage=Usage(input_tokens=12, output_tokens=34),
            cost_usd=Decimal("0.00002220"),
            latency_ms=2.0,
            log_bodies="redacted",
            request_body=body,
            response_body=body,
        )
        for n in range(entries)
    ]
    spool_dir = Path(tempfile.mkdtemp(prefix="writer-bench-"))
    try:
        from apps.audit.services import KIND

        server = Outbox(spool_dir)
        started = time.perf_counter()
        for record in records:
            server.put(KIND, record)
        server.close()  # the last fsync
        spooled = time.perf_counter() - started

        ingest = Ingest(spool_dir, batch_size=500)
        stop = threading.Event()
        started = time.perf_counter()
        thread = threading.Thread(target=ingest.run_forever, args=(stop,), kwargs={"interval": 0.01})
        thread.start()
        while AuditEntry.objects.filter(organization=organization).count() < entries:
            time.sleep(0.05)
        ingested = time.perf_counter() - started
        stop.set()
        thread.join()
        return {
            "entries": entries,
            "spool_per_s": entries / spooled,
            "ingest_per_s": entries / ingested,
            "database": connection.vendor,
        }
    finally:
        AuditEntry.objects.filter(organization=organization).delete()
        SpendRollup.objects.filter(organization=organization).delete()
        organization.delete()
        import shutil

        shutil.rmtree(spool_dir, ignore_errors=True)


def write_doc(line: str) -> None:
    text = DOC.read_text()
    block = f"{BEGIN}\n<!-- Written by `make bench` (bench/writer.py). -->\n\n{line}\n\n{END}"
    start, end = text.find(BEGIN), text.find(END)
    if start == -1 or end == -1:
        text = text.rstrip() + "\n\n### The audit writer\n\n" + block + "\n"
    else:
        text = text[:start] + block + text[end + len(END) :]
    DOC.write_text(text)


def main() -> int:
    entries = int(os.environ.get("BENCH_WRITER_ENTRIES", "20000"))
    if os.environ.get("BENCH_WRITER_CHILD"):
        import json

        print(json.dumps(measure(entries)))
        return 0
    with tempfile.TemporaryDirectory(prefix="writer-bench-") as data_dir:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "gateway_project.settings",
            "GATEWAY_DATA_DIR": data_dir,
            "SECRET_KEY": secrets.token_urlsafe(48),
            "LOG_LEVEL": "WARNING",
            "BENCH_WRITER_CHILD": "1",
        }
        python = sys.executable
        subprocess.run([python, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)  # noqa: S603
        out = subprocess.run(  # noqa: S603
            [python, "-m", "bench.writer"], cwd=ROOT, env=env, check=True, capture_output=True, text=True
        ).stdout
    import json

    result = json.loads(out.strip().splitlines()[-1])
    line = (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {result['database']}: "
        f"{result['entries']:,} request records. Server side (payload, pickle, encrypt, append; "
        f"fsync every 0.2 s): "
        f"**{result['spool_per_s']:,.0f} entries/s**; ingest (prepare, redact, insert with the spend "
        f"rollups): "
        f"**{result['ingest_per_s']:,.0f} entries/s** per ingest process."
    )
    print(line)
    if os.environ.get("BENCH_WRITE_DOC", "1") != "0":
        write_doc(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
