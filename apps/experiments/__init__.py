"""Experiments: a target's traffic split across variants, sticky per unit, and their results
(docs/experiments.md)."""
