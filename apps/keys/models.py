from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.core.models import UUIDModel
from apps.organizations.models import Organization
from apps.teams.models import Team


class Permission(models.TextChoices):
    LLM = "proxy:llm", "Every proxy endpoint"
    CHAT = "proxy:chat", "Chat completions"
    EMBEDDINGS = "proxy:embeddings", "Embeddings"
    MODELS = "proxy:models", "Model list"
    RESPONSES = "proxy:responses", "OpenAI Responses API"
    MESSAGES = "proxy:messages", "Anthropic Messages API"


class KeyStatus(models.TextChoices):
    ACTIVE = "active"
    REVOKED = "revoked"
    EXPIRED = "expired"


class ApiKey(UUIDModel):
    """An application's credential for the proxy. The secret itself is never stored: only its
    first characters (to recognise it) and its SHA-256 digest (to look it up)."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="api_keys")
    team = models.ForeignKey(Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="api_keys")
    name = models.CharField(max_length=200)
    key_prefix = models.CharField(max_length=16, db_index=True)
    key_digest = models.CharField(max_length=64, unique=True, editable=False)
    permissions = models.JSONField(default=list)
    # Empty means the team's (or organization's) regions apply; otherwise only these, within them.
    allowed_data_regions = models.JSONField(default=list, blank=True)
    # Model aliases and provider/model patterns it may call (apps/core/model_patterns.py); empty: any.
    allowed_models = models.JSONField(default=list, blank=True)
    is_active = models.BooleanField(default=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ("-created_at",)
        indexes = [models.Index(fields=("organization", "-created_at"), name="apikey_org_created")]

    def __str__(self) -> str:
        return f"{self.name} ({self.key_prefix}…)"

    def status_at(self, now: datetime) -> str:
        if not self.is_active:
            return KeyStatus.REVOKED
        if self.expires_at is not None and self.expires_at <= now:
            return KeyStatus.EXPIRED
        return KeyStatus.ACTIVE

    @property
    def status(self) -> str:
        return self.status_at(timezone.now())
