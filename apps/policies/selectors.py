"""Reads of policies."""

import uuid

from django.conf import settings
from django.db.models import Q, QuerySet

from apps.catalog.selectors import active_alias_snapshots
from apps.core.errors import InvalidRequest
from apps.keys.models import ApiKey
from apps.providers.models import Provider
from apps.teams.models import Team

from .engine import CHAT, EMBEDDINGS, ModelCatalog, PolicySnapshot, UnreadableInput
from .engine_cache import engine_for_dry_run, release_database_connections
from .models import Policy
from .patterns import RulesCost, rules_digest


def policies_of(organization_id) -> QuerySet[Policy]:
    return Policy.objects.filter(organization_id=organization_id).order_by("order", "created_at")


def next_policy_order(organization_id, *, limit: int) -> int:
    """Where a new policy goes when no ``order`` is given: after the organization's last (0 for the
    first), at most ``limit``."""
    top = policies_of(organization_id).order_by("-order").values_list("order", flat=True).first()
    return 0 if top is None else min(top + 1, limit)


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
        rules_checked=policy.rules_digest == rules_digest(policy.patterns, policy.terms, cost_of(policy)),
        compile_micros=policy.compile_micros,
        program_bytes=policy.program_bytes,
        teams=frozenset(policy.scope_teams),
        api_keys=frozenset(policy.scope_api_keys),
        models=frozenset(policy.scope_models),
    )


def cost_of(policy: Policy) -> RulesCost:
    """What the save-time check measured of the policy's patterns and terms."""
    return RulesCost(policy.compile_micros, policy.program_bytes)


def model_catalog(organization_id) -> ModelCatalog:
    """The organization's aliases as the engine matches models on them (the proxy builds the same
    from the aliases its configuration holds)."""
    return ModelCatalog.from_aliases(active_alias_snapshots(organization_id), Provider.values)


def policy_dry_run(
    *,
    organization_id,
    model: str,
    messages: list | None = None,
    input=None,
    team: str | None = None,
    api_key=None,
) -> dict:
    """What the organization's active policies would do to a sample request (``messages`` for chat
    completions or ``input`` for embeddings, one of them), with nothing sent and nothing recorded:
    the answer of ``POST /api/v1/policies/dry-run``. ``team`` is a team's id or slug and ``api_key``
    an API key's id, both of the organization; another organization's is refused exactly like an
    unknown one (400 ``validation_error`` on that field).

    The engine is compiled after the database connection is given back, and once for many dry runs
    of the organization's same policies (``engine_cache``): a dry run never holds a connection of the
    pool while it compiles, so one organization's dry runs cannot starve another's requests."""
    team_id = _dry_run_team_id(organization_id, team)
    api_key_id = _dry_run_api_key_id(organization_id, api_key)
    snapshots = active_policy_snapshots(organization_id)
    catalog = model_catalog(organization_id)
    release_database_connections()  # nothing below reads the database
    engine = engine_for_dry_run(
        organization_id, snapshots, catalog, timeout=settings.GATEWAY_POLICY_TIMEOUT_SECONDS
    )
    endpoint, field = (CHAT, "messages") if messages is not None else (EMBEDDINGS, "input")
    sample = messages if messages is not None else input
    context = {"model": model, "team_id": team_id, "api_key_id": api_key_id}
    try:
        verdict = engine.check_request({field: sample}, endpoint=endpoint, **context)
    except UnreadableInput as unreadable:
        message = str(unreadable)
        raise InvalidRequest(
            message, code="policy_unreadable_input", param=field, fields={field: [message]}
        ) from None
    return {
        "action": verdict.action,
        "reason": verdict.reason,
        "blocked": verdict.blocked is not None,
        "decisions": [decision.as_record() for decision in verdict.decisions],
        field: verdict.body[field],
        "redacts_response": engine.response_redactor(**context) is not None,
    }


def _dry_run_team_id(organization_id, value: str | None) -> str | None:
    if value is None:
        return None
    match = Q(slug=value)
    try:
        match |= Q(id=uuid.UUID(str(value)))
    except ValueError:
        pass
    team = Team.objects.filter(organization_id=organization_id).filter(match).first()
    if team is None:
        raise _unknown("team", "No such team in this organization.")
    return str(team.id)


def _dry_run_api_key_id(organization_id, value) -> str:
    if value is None:
        return ""
    try:
        value = uuid.UUID(str(value))
    except ValueError:
        raise _unknown("api_key", "No such API key in this organization.") from None
    if not ApiKey.objects.filter(organization_id=organization_id, id=value).exists():
        raise _unknown("api_key", "No such API key in this organization.")
    return str(value)


def _unknown(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, code="validation_error", param=field, fields={field: [message]})
