from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from apps.core import crypto
from apps.core.models import UUIDModel
from apps.organizations.models import Organization


class Provider(models.TextChoices):
    OPENAI = "openai", "OpenAI"
    ANTHROPIC = "anthropic", "Anthropic"
    AZURE_OPENAI = "azure_openai", "Azure OpenAI"
    OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible (vLLM, Ollama, Groq, Together, Mistral ...)"


# Where each provider lives when a key does not say; in each provider SDK's own convention.
DEFAULT_BASE_URLS = {
    Provider.OPENAI: "https://api.openai.com/v1",
    Provider.ANTHROPIC: "https://api.anthropic.com",
}


# The providers whose keys must say where (no default address) and which API version.
NEEDS_BASE_URL = (Provider.AZURE_OPENAI, Provider.OPENAI_COMPATIBLE)
NEEDS_API_VERSION = (Provider.AZURE_OPENAI,)


def missing_settings(provider: str, *, base_url: str, api_version: str) -> dict[str, str]:
    """What a key of ``provider`` lacks before the gateway can call it: field -> message. The API
    and the admin console both refuse such a key (and the OpenAPI document states it)."""
    missing = {}
    if provider in NEEDS_BASE_URL and not base_url:
        missing["base_url"] = f"A base URL is required for {provider}: it has no default address."
    if provider in NEEDS_API_VERSION and not api_version:
        missing["api_version"] = "Azure OpenAI needs an api_version (for example 2024-10-21)."
    return missing


class ProviderKey(UUIDModel):
    """An upstream credential the gateway holds. The secret is encrypted at rest and never shown
    again: responses carry only its last four characters."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="provider_keys")
    provider = models.CharField(max_length=32, choices=Provider.choices)
    name = models.CharField(max_length=200, blank=True)
    secret_encrypted = models.TextField(editable=False)
    key_hint = models.CharField(max_length=4, editable=False)
    # Share of weighted rotation among the keys of the same provider; 0 drains the key.
    weight = models.FloatField(default=1.0, validators=[MinValueValidator(0), MaxValueValidator(1_000_000)])
    data_region = models.CharField(max_length=32)
    base_url = models.URLField(max_length=500, blank=True)
    # Azure OpenAI: the api-version query parameter; the deployment is the catalog's upstream model.
    api_version = models.CharField(max_length=32, blank=True)
    # Some OpenAI-compatible servers refuse stream_options; their streams' usage is then estimated.
    supports_stream_usage = models.BooleanField(default=True)
    # An OpenAI-compatible server that serves OpenAI's Responses API itself (recent vLLM): the proxy
    # passes /v1/responses through to it rather than bridging over chat. Read for openai_compatible
    # keys only (OpenAI's and Azure's always do, Anthropic's never).
    speaks_responses = models.BooleanField(default=False)
    is_active = models.BooleanField(default=True)
    rotated_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at",)
        indexes = [models.Index(fields=("organization", "provider"), name="providerkey_org_provider")]

    def __str__(self) -> str:
        return f"{self.get_provider_display()} …{self.key_hint}"

    def set_secret(self, secret: str) -> None:
        self.secret_encrypted = crypto.encrypt(secret)
        self.key_hint = secret[-4:]

    def secret(self) -> str:
        return crypto.decrypt(self.secret_encrypted)

    @property
    def effective_base_url(self) -> str:
        return (self.base_url or DEFAULT_BASE_URLS.get(self.provider, "")).rstrip("/")
