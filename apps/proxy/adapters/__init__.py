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

# Providers whose API serves OpenAI's Responses API itself; the others are bridged over chat.
SPEAK_RESPONSES = frozenset({"openai", "azure_openai"})
# Providers whose API is Anthropic's Messages API; the others are bridged over chat.
SPEAK_MESSAGES = frozenset({"anthropic"})


def adapter_for(provider: str) -> Adapter:
    return ADAPTERS[provider]
