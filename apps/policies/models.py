from django.db import models

from apps.core.models import UUIDModel
from apps.organizations.models import Organization


class Action(models.TextChoices):
    REDACT = "redact"
    BLOCK = "block"
    FLAG = "flag"


class Policy(UUIDModel):
    """One rule of an organization's request policy (docs/policies.md). Policies apply in ``order``;
    the lists are validated by the services (detector names, compilable patterns, bounded sizes)."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="policies")
    name = models.CharField(max_length=100)
    action = models.CharField(max_length=10, choices=Action.choices)
    detectors = models.JSONField(default=list, blank=True)
    patterns = models.JSONField(default=list, blank=True)
    # Denied words or phrases: case-insensitive, whole words.
    terms = models.JSONField(default=list, blank=True)
    denied_models = models.JSONField(default=list, blank=True)
    max_prompt_chars = models.PositiveIntegerField(null=True, blank=True)
    # Redact policies only: the answer is redacted too (streamed answers across chunk boundaries).
    apply_to_response = models.BooleanField(default=False)
    order = models.IntegerField(default=0)
    is_active = models.BooleanField(default=True)
    # Empty lists mean every team, every API key, every model.
    scope_teams = models.JSONField(default=list, blank=True)
    scope_api_keys = models.JSONField(default=list, blank=True)
    scope_models = models.JSONField(default=list, blank=True)
    # What the save-time check (patterns.py) measured of the patterns and terms, and the digest of
    # them with those measures: the proxy compiles only lists whose digest matches, so nothing
    # unchecked is ever compiled by a server, and the measures bound the organization's total.
    rules_digest = models.CharField(max_length=64, blank=True, default="", editable=False)
    compile_micros = models.PositiveIntegerField(default=0, editable=False)
    program_bytes = models.PositiveIntegerField(default=0, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=("organization", "name"), name="unique_policy_name")]
        ordering = ("order", "created_at")
        verbose_name_plural = "policies"

    def __str__(self) -> str:
        return self.name
