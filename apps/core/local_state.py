"""The folders the embedded default keeps its state in, made when a process starts.

Importing the settings writes nothing (a tool may import them only to read a value); every process
that Django sets up (the server, the Celery worker, a management command) makes what it is about to
use: the SQLite database's folder (SQLite makes the file, not the folder) and the folders of
Celery's file broker (kombu makes only one of them). Production (PostgreSQL, Redis) needs neither.
"""

from pathlib import Path

from django.conf import settings


def local_folders() -> list[Path]:
    folders = []
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3" and str(database["NAME"]) != ":memory:":
        folders.append(Path(database["NAME"]).parent)
    broker = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {})
    for option in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        if broker.get(option):
            folders.append(Path(broker[option]))
    return folders


def make_local_folders() -> None:
    for folder in local_folders():
        folder.mkdir(parents=True, exist_ok=True)
