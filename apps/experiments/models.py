from django.conf import settings
from django.db import models

from apps.core.models import UUIDModel
from apps.organizations.models import Organization
from apps.prompts.models import PromptTemplate


class ExperimentStatus(models.TextChoices):
    DRAFT = "draft"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"


class Experiment(UUIDModel):
    """A target's traffic split across variants by weight (docs/experiments.md). The target is
    exactly one of a model alias, by name (the name clients send as ``model``), or a prompt
    template, by foreign key (a slug may be renamed; deleting the template deletes its
    experiments). At most one running experiment per target: a partial unique index says so."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="experiments")
    name = models.CharField(max_length=200)
    target_model = models.CharField(max_length=200, blank=True, default="")
    target_template = models.ForeignKey(
        PromptTemplate, on_delete=models.CASCADE, null=True, blank=True, related_name="experiments"
    )
    status = models.CharField(max_length=16, choices=ExperimentStatus.choices, default=ExperimentStatus.DRAFT)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    winner = models.ForeignKey("Variant", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    promoted_at = models.DateTimeField(null=True, blank=True)
    promoted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # What the promotion moved: {"variant", "target", "from", "to"} (a label's version numbers, or
    # an alias's deployments before and after).
    promotion = models.JSONField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at",)
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(target_template__isnull=True) & ~models.Q(target_model=""))
                | (models.Q(target_template__isnull=False) & models.Q(target_model="")),
                name="experiment_one_target",
            ),
            models.UniqueConstraint(
                fields=("organization", "target_model"),
                condition=models.Q(status="running") & ~models.Q(target_model=""),
                name="one_running_experiment_per_model",
            ),
            models.UniqueConstraint(
                fields=("target_template",),
                condition=models.Q(status="running") & models.Q(target_template__isnull=False),
                name="one_running_experiment_per_prompt",
            ),
        ]
        indexes = [models.Index(fields=("organization", "status"), name="experiment_org_status")]

    def __str__(self) -> str:
        return self.name


class Variant(UUIDModel):
    """One arm of an experiment. ``weight`` is a whole number (0 allowed: no traffic; the sum must
    be positive); the share of a variant is its weight over the sum. ``position`` 0 is the control.
    ``model`` is an alias of the organization's catalog; ``prompt_version`` a version number of the
    target template; ``parameters`` request parameters from ``services.PARAMETERS``."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="variants")
    name = models.CharField(max_length=100)
    position = models.PositiveSmallIntegerField()
    weight = models.PositiveIntegerField()
    model = models.CharField(max_length=200, blank=True, default="")
    prompt_version = models.PositiveIntegerField(null=True, blank=True)
    parameters = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ("experiment", "position")
        constraints = [
            models.UniqueConstraint(fields=("experiment", "name"), name="unique_variant_name"),
            models.UniqueConstraint(fields=("experiment", "position"), name="unique_variant_position"),
        ]

    def __str__(self) -> str:
        return self.name


class Feedback(UUIDModel):
    """A score and/or label for one proxied request (its audit entry id, ``x-gateway-request-id``),
    one per request, updated by a second post. Who gave it: the API key or the signed-in user."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    request_id = models.UUIDField()
    score = models.FloatField(null=True, blank=True)
    label = models.CharField(max_length=100, blank=True, default="")
    comment = models.TextField(blank=True, default="")
    api_key_id = models.UUIDField(null=True, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at",)
        verbose_name_plural = "feedback"
        constraints = [
            models.UniqueConstraint(fields=("organization", "request_id"), name="one_feedback_per_request")
        ]

    def __str__(self) -> str:
        return f"feedback on {self.request_id}"


class PendingFeedback(UUIDModel):
    """Feedback on a request whose audit entry is not written yet (the ingest writes it about a
    second after the answer; docs/experiments.md). One row per post, in the order received: when the
    entry arrives, the rows whose giver made the request (its key, or a session of its organization)
    become its ``Feedback``, in that order, and every row is removed; a row whose request never
    arrives is removed after ``GATEWAY_FEEDBACK_PENDING_SECONDS``. ``None`` is a field not given."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    request_id = models.UUIDField()
    score = models.FloatField(null=True, blank=True)
    # NULL is "not sent", which an empty string is not (a post may clear a comment).
    label = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    comment = models.TextField(null=True, blank=True)  # noqa: DJ001
    api_key_id = models.UUIDField(null=True, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ("created_at", "id")
        verbose_name_plural = "pending feedback"
        indexes = [
            models.Index(fields=("request_id",), name="pending_feedback_request"),
            models.Index(fields=("organization", "created_at"), name="pending_feedback_org_time"),
        ]

    def __str__(self) -> str:
        return f"pending feedback on {self.request_id}"
