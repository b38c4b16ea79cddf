"""Reads of events."""

from django.db.models import QuerySet

from apps.organizations.models import Organization

from .models import Event


def events_of(organization: Organization, type: str | None = None) -> QuerySet[Event]:
    """The organization's events, newest first; only those of ``type`` when given."""
    events = Event.objects.filter(organization=organization)
    if type is not None:
        events = events.filter(type=type)
    return events
