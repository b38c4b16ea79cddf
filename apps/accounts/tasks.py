from celery import shared_task
from django.core.management import call_command


@shared_task
def flush_expired_session_tokens() -> None:
    """Expired refresh tokens and their blacklist rows are dead weight; drop them."""
    call_command("flushexpiredtokens")
