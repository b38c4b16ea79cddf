from django.conf import settings
from django.db import models

from apps.core.models import UUIDModel
from apps.organizations.models import Organization


class PromptTemplate(UUIDModel):
    """A named prompt of an organization; what it says lives in its immutable versions, and its
    labels say which version serves (docs/prompts.md)."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="prompt_templates")
    slug = models.CharField(max_length=100)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("organization", "slug"), name="unique_prompt_template_slug")
        ]
        ordering = ("created_at",)

    def __str__(self) -> str:
        return self.slug


class PromptVersion(UUIDModel):
    """One immutable state of a template, numbered from 1 per template. Versions are never changed
    and never deleted on their own: only with their template (so a label cannot point at a
    version that does not exist)."""

    template = models.ForeignKey(PromptTemplate, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    # [{"role", "content"}], contents in the template syntax (apps/prompts/rendering.py).
    messages = models.JSONField()
    # [{"name", "default"?}]: exactly the variables the messages use.
    variables = models.JSONField(default=list, blank=True)
    # Request parameters the version brings (inputs.DEFAULT_PARAMETERS); the client's own win.
    defaults = models.JSONField(default=dict, blank=True)
    note = models.CharField(max_length=500, blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("template", "number"), name="unique_prompt_version_number")
        ]
        ordering = ("template", "number")

    def __str__(self) -> str:
        return f"{self.template} v{self.number}"

    def save(self, *args, **kwargs) -> None:
        # A version that served requests must stay what it was: a change is a new version.
        if not self._state.adding:
            raise ValueError("A prompt version is immutable; create a new version instead.")
        super().save(*args, **kwargs)


class PromptLabel(UUIDModel):
    """A name (``production``, ``staging`` ...) that points at one version of the template; moving
    it publishes or rolls back. RESTRICT: a version may only go with its template."""

    template = models.ForeignKey(PromptTemplate, on_delete=models.CASCADE, related_name="labels")
    name = models.CharField(max_length=64)
    version = models.ForeignKey(PromptVersion, on_delete=models.RESTRICT, related_name="labels")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=("template", "name"), name="unique_prompt_label")]
        ordering = ("template", "name")

    def __str__(self) -> str:
        return f"{self.template}@{self.name}"


class PromptLabelMove(UUIDModel):
    """Every set, move and removal of a label: numbers rather than foreign keys, so the history
    outlives the label. ``from_version`` is null when the label was created, ``to_version`` when it
    was removed."""

    template = models.ForeignKey(PromptTemplate, on_delete=models.CASCADE, related_name="label_moves")
    label = models.CharField(max_length=64)
    from_version = models.PositiveIntegerField(null=True, blank=True)
    to_version = models.PositiveIntegerField(null=True, blank=True)
    moved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        indexes = [models.Index(fields=("template", "label", "created_at"), name="prompt_label_history")]
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.template}@{self.label}: {self.from_version} -> {self.to_version}"
