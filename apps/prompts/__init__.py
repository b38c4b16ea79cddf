"""Prompt templates: immutable versions, labels that publish them, rendered by the proxy (docs/prompts.md)."""
