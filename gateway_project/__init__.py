# Celery's app is not imported here (as Django's Celery guide does): a server process would load
# Celery at start-up. `celery -A gateway_project` finds gateway_project/celery.py by itself, and a
# task is sent through apps/core/background.py, which defines the app.
