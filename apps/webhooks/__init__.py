"""Webhooks: an organization's endpoints, and the signed deliveries of its events (docs/webhooks.md)."""
