from django.core.management import call_command

from apps.core.background import task
from apps.core.database import DatabaseUnreachable


# A database outage is logged in one line, without a traceback: the task runs again on schedule.
@task(throws=(DatabaseUnreachable,))
def flush_expired_session_tokens() -> None:
    """Expired refresh tokens and their blacklist rows are dead weight; drop them."""
    call_command("flushexpiredtokens")
