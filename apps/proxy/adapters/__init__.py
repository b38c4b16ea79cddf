"""Upstream adapters by provider name (the values of ``apps.providers.models.Provider``)."""

from .base import Adapter
from .openai import AzureOpenAIAdapter, OpenAIAdapter

ADAPTERS: dict[str, Adapter] = {
    "openai": OpenAIAdapter(),
    "openai_compatible": OpenAIAdapter(),
    "azure_openai": AzureOpenAIAdapter(),
}


def adapter_for(provider: str) -> Adapter:
    return ADAPTERS[provider]
