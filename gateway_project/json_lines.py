"""What a process prints rather than logs, as JSON log lines when ``GATEWAY_LOG_FORMAT=json``: then
every line of ``make run`` and of the image's containers is JSON.

- ``python -m gateway_project.json_lines LOGGER``: each line of stdin (the start-up banner of
  scripts/run.sh, Celery's output as it stops);
- ``JsonLines``: a process's own stdout (``manage.py``'s reporting commands: prepare, the ingest).
"""

import atexit
import io
import json
import sys
import time
from datetime import UTC, datetime
from typing import TextIO


def json_line(logger: str, message: str, level: str = "INFO") -> str:
    stamp = datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="milliseconds")
    entry = {"time": stamp.replace("+00:00", "Z"), "level": level, "logger": logger, "message": message}
    return json.dumps(entry)


class JsonLines(io.TextIOBase):
    """A text stream that writes each complete line to ``stream`` as a JSON log line of ``logger``."""

    def __init__(self, stream: TextIO, logger: str) -> None:
        self.stream, self.logger, self.pending = stream, logger, ""
        atexit.register(self.finish)

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            if line.strip():
                self.stream.write(json_line(self.logger, line) + "\n")
        self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def finish(self) -> None:
        """What was printed without a final line break, at exit."""
        if self.pending.strip():
            self.stream.write(json_line(self.logger, self.pending) + "\n")
            self.stream.flush()
        self.pending = ""


def main() -> None:
    logger = sys.argv[1] if len(sys.argv) > 1 else "gateway"
    for line in sys.stdin:
        message = line.rstrip("\n")
        if message.strip():
            print(json_line(logger, message), flush=True)


if __name__ == "__main__":
    main()
