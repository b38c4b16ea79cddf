"""Policies: what an organization lets through, redacts or refuses (docs/policies.md)."""
