from django.db import models

from apps.core.models import UUIDModel
from apps.organizations.models import Organization
from apps.providers.models import Provider


class ModelAlias(UUIDModel):
    """A model name an organization's applications call (``gpt-4o-mini``), mapped to one or more
    deployments and, when all of them fail, to fallback aliases."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="model_aliases")
    alias = models.CharField(max_length=200)
    description = models.CharField(max_length=500, blank=True)
    # Other aliases of the same organization, tried in order when every deployment failed.
    fallbacks = models.JSONField(default=list, blank=True)
    is_active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("alias",)
        constraints = [models.UniqueConstraint(fields=("organization", "alias"), name="unique_model_alias")]
        verbose_name_plural = "model aliases"

    def __str__(self) -> str:
        return self.alias


class Deployment(UUIDModel):
    """One place an alias can be served: a provider and the model id it knows it by (for Azure
    OpenAI, the deployment name). Deployments are tried in ``priority`` order."""

    alias = models.ForeignKey(ModelAlias, on_delete=models.CASCADE, related_name="deployments")
    provider = models.CharField(max_length=32, choices=Provider.choices)
    upstream_model = models.CharField(max_length=200)
    priority = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ("priority", "created_at")

    def __str__(self) -> str:
        return f"{self.provider}/{self.upstream_model}"


class ModelPrice(UUIDModel):
    """An organization's price for an upstream model, in USD per million tokens, from
    ``effective_from`` until the next version. Prices are never edited in place: a change is a new
    version, so a past request's cost can always be recomputed with the price it was charged."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="model_prices")
    provider = models.CharField(max_length=32, choices=Provider.choices)
    model = models.CharField(max_length=200)
    input_per_mtok = models.DecimalField(max_digits=14, decimal_places=6)
    cached_input_per_mtok = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    output_per_mtok = models.DecimalField(max_digits=14, decimal_places=6)
    reasoning_per_mtok = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    effective_from = models.DateTimeField()

    class Meta:
        ordering = ("provider", "model", "-effective_from")
        constraints = [
            models.UniqueConstraint(
                fields=("organization", "provider", "model", "effective_from"), name="unique_price_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.model} from {self.effective_from:%Y-%m-%d}"


class DefaultPrice(UUIDModel):
    """The price an organization charges for a model that has no price of its own (neither the
    organization's nor the shipped list's), in USD per million tokens, from ``effective_from`` until
    the next version; both prices null in a version mean "no default from then". Versioned like
    ``ModelPrice``, so reconcile recomputes a past request at the default it was charged. Read and
    written as the organization's ``default_price`` setting (docs/budgets.md)."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="default_prices")
    input_per_mtok = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    output_per_mtok = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    effective_from = models.DateTimeField()

    class Meta:
        ordering = ("-effective_from",)
        constraints = [
            models.UniqueConstraint(fields=("organization", "effective_from"), name="unique_default_price"),
            models.CheckConstraint(
                condition=models.Q(input_per_mtok__isnull=True, output_per_mtok__isnull=True)
                | models.Q(input_per_mtok__isnull=False, output_per_mtok__isnull=False),
                name="default_price_both_or_neither",
            ),
        ]

    def __str__(self) -> str:
        return f"default price from {self.effective_from:%Y-%m-%d %H:%M}"
