"""Upstream adapters by provider name (the values of ``apps.providers.models.Provider``)."""

from .anthropic import AnthropicAdapter
from .base import Adapter
from .openai import AzureOpenAIAdapter, OpenAIAdapter

ADAPTERS: dict[str, Adapter] = {
    "openai": OpenAIAdapter(),
    "openai_compatible": OpenAIAdapter(),
    "azure_openai": AzureOpenAIAdapter(),
    "anthropic": AnthropicAdapter(),
}


def adapter_for(provider: str) -> Adapter:
    return ADAPTERS[provider]
