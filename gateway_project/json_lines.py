"""``python -m gateway_project.json_lines LOGGER``: each line of stdin as a JSON log line on stdout,
for what a process prints rather than logs (``manage.py prepare``'s report, the start-up banner of
scripts/run.sh) when ``GATEWAY_LOG_FORMAT=json``: then every line of ``make run`` is JSON."""

import json
import sys
import time
from datetime import UTC, datetime


def json_line(logger: str, message: str, level: str = "INFO") -> str:
    stamp = datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="milliseconds")
    entry = {"time": stamp.replace("+00:00", "Z"), "level": level, "logger": logger, "message": message}
    return json.dumps(entry)


def main() -> None:
    logger = sys.argv[1] if len(sys.argv) > 1 else "gateway"
    for line in sys.stdin:
        message = line.rstrip("\n")
        if message.strip():
            print(json_line(logger, message), flush=True)


if __name__ == "__main__":
    main()
