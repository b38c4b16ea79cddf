"""Django's PostgreSQL backend with the process's database breaker (``apps/core/database.py``)."""
