"""A webhook as it is written (the bodies of POST and PATCH /api/v1/webhooks, the admin's form, the
console's): its types and shapes, defined once. ``webhook_create``, ``webhook_update`` and
``webhook_check`` parse their raw input with it before what a schema cannot say (the URL's host
resolving to an allowed address); the API's schema is written from it."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import StrictBooleanField, StrictCharField
from apps.events.models import EventType

from .addresses import URL_LENGTH
from .models import ALL_EVENTS

EVENT_KINDS = [ALL_EVENTS, *EventType.values]
DESCRIPTION_LENGTH = 500


@extend_schema_field(
    {
        "type": "string",
        "format": "uri",
        "pattern": "^https://",
        "minLength": 9,
        "maxLength": URL_LENGTH,
        "description": "An https:// URL with a host and no credentials or fragment. A host that does not "
        "resolve, or resolves to a refused address (link-local and metadata always, private and loopback "
        "unless GATEWAY_ALLOW_PRIVATE_WEBHOOKS), is a 400 webhook_address_refused.",
    }
)
class WebhookUrlField(StrictCharField):
    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", URL_LENGTH)
        kwargs.setdefault("trim_whitespace", False)  # " https://..." is not a URL, and not quietly one
        super().__init__(**kwargs)


def events_field(**kwargs) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_KINDS),
        allow_empty=False,
        min_length=1,  # the schema's minItems
        max_length=50,
        help_text='Event kinds to receive; ["*"] for every kind.',
        **kwargs,
    )


# A webhook's writable fields; the API's WebhookCreateSerializer is these, its WebhookUpdateSerializer
# these as a PATCH (parsed partial). Not closed: the API has always passed over a field it does not
# know here. (No docstring: the API's schema would take it as its components' description.)
class WebhookInputSerializer(serializers.Serializer):
    url = WebhookUrlField()
    events = events_field(required=False)
    description = StrictCharField(max_length=DESCRIPTION_LENGTH, required=False, allow_blank=True)
    is_active = StrictBooleanField(required=False)
