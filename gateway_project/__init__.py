# Celery's app is not imported here (as Django's Celery guide does): a server process would load
# Celery at start-up. `celery -A gateway_project` finds gateway_project/celery.py by itself, and a
# task is sent through apps/core/background.py, which defines the app.

import os

# Every entry point of the project's own (`python -m gateway_project.serve`, the supervisor's children,
# scripts) runs with the project's settings unless told otherwise, as manage.py and asgi.py do: `make
# run` sets no DJANGO_SETTINGS_MODULE, and the server's access log reads the settings as it is
# imported, before Daphne loads the application.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
