"""The response cache: L1 in process, L2 in Redis, L3 semantic (docs/cache.md)."""
