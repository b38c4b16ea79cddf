from django.db import models

from apps.organizations.models import Organization


class AuditEntry(models.Model):
    """One proxied request, written off the request by the outbox. Its id is the request id
    (``x-gateway-request-id``, the analytics ``log_id``), which makes every write idempotent.

    Teams, keys and provider keys are kept as plain ids, not foreign keys: an entry must outlive
    what it names, and the writer must not pay for constraint checks."""

    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField()  # when the request arrived (UTC)
    endpoint = models.CharField(max_length=64)
    team_id = models.UUIDField(null=True, blank=True)
    api_key_id = models.UUIDField(null=True, blank=True)
    api_key_prefix = models.CharField(max_length=16, blank=True)
    requested_model = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=32, blank=True)
    provider_key_id = models.UUIDField(null=True, blank=True)
    model = models.CharField(max_length=200, blank=True)
    stream = models.BooleanField(default=False)
    stream_completed = models.BooleanField(null=True, blank=True)
    client_disconnected = models.BooleanField(default=False)
    status = models.PositiveSmallIntegerField()
    error_type = models.CharField(max_length=64, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    # The routing outcome, one object per upstream attempt: provider, provider_key_id, model, alias,
    # status, outcome, latency_ms, error.
    attempts = models.JSONField(default=list)
    cache = models.CharField(max_length=8, default="miss")
    # The stored prompt a templated request was rendered from (docs/prompts.md): its slug, version
    # and the label that chose it ("" when a number did).
    prompt_template_id = models.UUIDField(null=True, blank=True)
    prompt_template = models.CharField(max_length=100, blank=True)
    prompt_version = models.PositiveIntegerField(null=True, blank=True)
    prompt_label = models.CharField(max_length=64, blank=True)
    # The experiment that assigned the request a variant (docs/experiments.md), and the variant's name.
    experiment_id = models.UUIDField(null=True, blank=True)
    experiment_variant = models.CharField(max_length=100, blank=True)
    policy_action = models.CharField(max_length=16, blank=True)
    policy_reason = models.CharField(max_length=500, blank=True)
    policy_decisions = models.JSONField(default=list)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cached_input_tokens = models.PositiveIntegerField(default=0)
    reasoning_tokens = models.PositiveIntegerField(default=0)
    # Of the input, tokens written to the provider's prompt cache (Anthropic's cache writes).
    cache_write_tokens = models.PositiveIntegerField(default=0)
    usage_estimated = models.BooleanField(default=False)
    cost_usd = models.DecimalField(max_digits=18, decimal_places=8, default=0)
    # Which price cost_usd was reckoned at: organization (its own version), shipped (the list price),
    # default (its price for unpriced models) or unpriced (none: cost 0); "" when no upstream answered.
    price_source = models.CharField(max_length=16, blank=True)
    # A cache hit's savings: what the answer cost when it was first bought (docs/cache.md).
    cache_savings_usd = models.DecimalField(max_digits=18, decimal_places=8, default=0)
    latency_ms = models.FloatField(default=0)
    ttft_ms = models.FloatField(null=True, blank=True)
    upstream_ms = models.FloatField(default=0)
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=500, blank=True)
    # full, redacted or metadata: what the organization's setting kept of the bodies.
    body_mode = models.CharField(max_length=16, default="metadata")
    request_body = models.TextField(blank=True)
    response_body = models.TextField(blank=True)

    class Meta:
        ordering = ("-created_at", "-id")
        verbose_name_plural = "audit entries"
        indexes = [
            # Newest first per organization, and the cursor's tie-breaker: every list and range query.
            models.Index(fields=("organization", "-created_at", "-id"), name="audit_org_time"),
            models.Index(fields=("organization", "team_id", "-created_at"), name="audit_org_team_time"),
            models.Index(fields=("organization", "api_key_id", "-created_at"), name="audit_org_key_time"),
            models.Index(fields=("created_at",), name="audit_time"),  # retention sweeps across organizations
            # An experiment's results (docs/experiments.md); partial, so other requests pay nothing for it.
            models.Index(
                fields=("experiment_id", "created_at"),
                name="audit_experiment_time",
                condition=models.Q(experiment_id__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.status} ({self.id})"


class SpendRollup(models.Model):
    """Spend and volume per organization, hour, team, API key, provider and model: the aggregates
    budgets, the overview and the console read instead of scanning the log. Kept up to date off the
    request after each audit batch (a secondary path that may lag or fail without failing requests)
    and rebuilt from the log by reconcile. Team and key are "" when a request had none."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()  # the bucket's start, UTC
    team_id = models.CharField(max_length=36, blank=True)
    api_key_id = models.CharField(max_length=36, blank=True)
    provider = models.CharField(max_length=32, blank=True)
    model = models.CharField(max_length=200, blank=True)
    requests = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=20, decimal_places=8, default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=("organization", "hour", "team_id", "api_key_id", "provider", "model"),
                name="unique_spend_rollup",
            )
        ]

    def __str__(self) -> str:
        return f"{self.organization_id} {self.hour:%Y-%m-%d %H}h {self.provider}/{self.model}"
