from django.db import models

from apps.core.models import UUIDModel
from apps.organizations.models import Organization


class StoredResponse(UUIDModel):
    """A Response the gateway keeps so that a later request can continue it (``previous_response_id``)
    and a client can read or delete it (docs/proxy.md, "Conversation state"). Written by the outbox's
    ingest only, never on a request.

    Bridged (``native`` false): the turn itself, encrypted: its input items, its output items, the ids
    of the turns before it and the Response as ``GET /v1/responses/{id}`` answers it. Native: only
    which provider key made it, since the provider keeps the turn."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    response_id = models.CharField(max_length=200)  # the id the client holds: resp_...
    native = models.BooleanField()
    provider_key_id = models.UUIDField(null=True)  # native: whose upstream holds the response
    api_key_id = models.UUIDField(null=True)
    # The team the request was made for: only requests for the same team (or, for None, for no team)
    # may read or continue it.
    team_id = models.UUIDField(null=True)
    model = models.CharField(max_length=200)
    created_at = models.DateTimeField()
    content_encrypted = models.TextField(blank=True)  # Fernet (apps/core/crypto.py); "" for native
    # Deleted by its client: kept as this mark (no content) until retention, so that the ingest
    # writing the turn after its DELETE (it may, about a second late) cannot bring it back.
    deleted = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("organization", "response_id"), name="stored_response_org_id"),
        ]
        indexes = [models.Index(fields=("created_at",), name="stored_response_time")]

    def __str__(self) -> str:
        return self.response_id
