#!/usr/bin/env python
import os
import sys

# The commands whose output is a report, not data: JSON log lines with GATEWAY_LOG_FORMAT=json, like
# every other line of the gateway (dumpdata and the like keep their output as it is).
REPORTING_COMMANDS = {"prepare", "migrate", "bootstrap_admin", "outbox_ingest"}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    from django.core.management import execute_from_command_line

    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if os.environ.get("GATEWAY_LOG_FORMAT") == "json" and command in REPORTING_COMMANDS:
        from gateway_project.json_lines import JsonLines

        sys.stdout = JsonLines(sys.stdout, f"gateway.{command}")

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
