"""Reads of policies."""

from django.db.models import QuerySet

from .engine import PolicySnapshot
from .models import Policy


def policies_of(organization_id) -> QuerySet[Policy]:
    return Policy.objects.filter(organization_id=organization_id).order_by("order", "created_at")


def active_policy_snapshots(organization_id) -> tuple[PolicySnapshot, ...]:
    """The organization's active policies in order, as plain data: what the proxy's engine is built
    from (``engine.PolicyEngine.build``) when the organization's configuration generation moves."""
    return tuple(snapshot(policy) for policy in policies_of(organization_id).filter(is_active=True))


def snapshot(policy: Policy) -> PolicySnapshot:
    return PolicySnapshot(
        id=str(policy.id),
        name=policy.name,
        action=policy.action,
        detectors=tuple(policy.detectors),
        patterns=tuple(policy.patterns),
        terms=tuple(policy.terms),
        denied_models=frozenset(policy.denied_models),
        max_prompt_chars=policy.max_prompt_chars,
        apply_to_response=policy.apply_to_response,
        teams=frozenset(policy.scope_teams),
        api_keys=frozenset(policy.scope_api_keys),
        models=frozenset(policy.scope_models),
    )
