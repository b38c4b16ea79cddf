"""Writes of policies. The API, the admin and the console all hand these the policy as the API's body:
it is parsed here with the one input definition (inputs.py), then checked for what a schema cannot
say (patterns that compile, within the organization's bound; scope ids of its teams and keys; at
least one rule; apply_to_response only when redacting; a name taken), so that nothing a client sends
can fail an insert or reach the proxy's engine uncompiled; every write bumps the organization's
configuration generation, so each proxy worker rebuilds its engine."""

import uuid
from collections.abc import Iterable, Mapping

import regex
from django.db import transaction
from django.db.models import Sum

from apps.core.api.serializers import validated
from apps.core.errors import Conflict, InvalidRequest
from apps.core.generations import bump_generation
from apps.core.unique import save_unique
from apps.keys.models import ApiKey
from apps.organizations.models import Organization
from apps.teams.models import Team

from . import selectors
from .inputs import ORDER_LIMIT, PolicyInputSerializer
from .models import Action, Policy
from .patterns import (
    ACTIVE_POLICIES_LIMIT,
    PatternRefused,
    RulesCost,
    check_rules,
    organization_refusal,
    rules_digest,
)

# Group references cannot survive the join into one alternation (group numbers move) and are the
# usual way to write a pattern that backtracks without end; recursion and conditionals likewise.
_GROUP_REFERENCE = regex.compile(r"\\[1-9]|\\g<|\\k<|\(\?P[=>]|\(\?&|\(\?R\)|\(\?[0-9+\-]|\(\?\(")

FIELDS = (
    "name",
    "action",
    "detectors",
    "patterns",
    "terms",
    "denied_models",
    "max_prompt_chars",
    "apply_to_response",
    "order",
    "is_active",
    "scope_teams",
    "scope_api_keys",
    "scope_models",
)


def policy_create(*, organization: Organization, data: Mapping) -> Policy:
    """``data``: the policy as the API's body has it (inputs.py ``PolicyInputSerializer``)."""
    values = _parsed(data, partial=False)
    if "order" not in values:  # after the last one: a new policy never jumps ahead of the others
        values["order"] = selectors.next_policy_order(organization.id, limit=ORDER_LIMIT)
    policy = Policy(organization=organization)
    _apply(policy, values)
    return _save(policy, create=True, grows=True)


def policy_update(*, policy: Policy, data: Mapping) -> Policy:
    """``data``: the fields to change, as the API's PATCH body has them."""
    changes = _parsed(data, partial=True)
    rechecked = _apply(policy, changes)
    grows = rechecked or bool({"is_active", "patterns", "terms"} & set(changes))
    return _save(policy, create=False, grows=grows)


def _parsed(data: Mapping, *, partial: bool) -> dict:
    """``data`` parsed (inputs.py), ``scope`` spread into the model's three fields."""
    values = dict(validated(PolicyInputSerializer, data, partial=partial))
    scope = values.pop("scope", None) or {}
    for part in ("teams", "api_keys", "models"):
        if part in scope:
            values[f"scope_{part}"] = scope[part]
    return values


def policy_delete(*, policy: Policy) -> None:
    organization_id = policy.organization_id
    with transaction.atomic():
        policy.delete()
        bump_generation(organization_id)


@transaction.atomic
def policies_reorder(*, organization: Organization, policy_ids: Iterable) -> list[Policy]:
    """Gives the listed policies of the organization the orders 0, 1, 2 ... in the list's order.
    An id that is not one of the organization's policies (another organization's included) is
    refused like an unknown one."""
    ids = [str(value) for value in policy_ids]
    policies = {str(p.id): p for p in Policy.objects.filter(organization=organization, id__in=_uuids(ids))}
    missing = [value for value in ids if value not in policies]
    if missing or len(set(ids)) != len(ids):
        message = "Every id must be a distinct policy of this organization."
        raise InvalidRequest(message, code="validation_error", fields={"policy_ids": [message]})
    ordered = []
    for position, value in enumerate(ids):
        policy = policies[value]
        policy.order = position
        policy.save(update_fields=["order", "updated_at"])
        ordered.append(policy)
    bump_generation(organization.id)
    return ordered


def _save(policy: Policy, *, create: bool, grows: bool) -> Policy:
    """``grows``: the save may add to what the organization's active policies cost to compile (a new
    or reactivated policy, changed patterns or terms), which is then checked against its bound."""
    taken = Policy.objects.filter(organization_id=policy.organization_id, name=policy.name)
    if not create:
        taken = taken.exclude(pk=policy.pk)

    def write() -> None:
        if policy.is_active and grows:
            _check_organization_bound(policy)
        policy.save()
        bump_generation(policy.organization_id)

    save_unique(taken=taken, conflict=_name_taken(policy.name), write=write)
    return policy


def _check_organization_bound(policy: Policy) -> None:
    """The organization's active policies, this one as it will be saved included, within the bound
    of ``patterns.organization_refusal``. The organization's row is locked first, so two saves of
    its policies at once are checked one after the other, each counting the other's."""
    Organization.objects.select_for_update().filter(pk=policy.organization_id).values_list("pk").first()
    others = Policy.objects.filter(organization_id=policy.organization_id, is_active=True)
    if policy.pk is not None and not policy._state.adding:
        others = others.exclude(pk=policy.pk)
    totals = others.aggregate(micros=Sum("compile_micros"), size=Sum("program_bytes"))
    count = others.count()
    cost = RulesCost(
        (totals["micros"] or 0) + policy.compile_micros, (totals["size"] or 0) + policy.program_bytes
    )
    refusal = organization_refusal(active=count + 1, cost=cost)
    if refusal is None:
        return
    if count + 1 > ACTIVE_POLICIES_LIMIT:
        field, message = "is_active", f"{refusal} Deactivate or delete one first."
    else:
        field = "patterns" if policy.patterns else "terms"
        message = (
            f"{refusal} The others take {(totals['micros'] or 0) / 1000:.0f} ms and "
            f"{(totals['size'] or 0) // 1024} KiB already, this one {policy.compile_micros / 1000:.0f} ms "
            f"and {policy.program_bytes // 1024} KiB."
        )
    raise InvalidRequest(
        f"Invalid value for '{field}': {message}",
        code="validation_error",
        param=field,
        fields={field: [message]},
    )


def _name_taken(name: str) -> Conflict:
    return Conflict(f"A policy named '{name}' exists already.", code="policy_name_taken")


def _apply(policy: Policy, values: dict) -> bool:
    """Checks ``values`` and sets them on ``policy`` (InvalidRequest naming every field refused);
    True when the patterns and terms were checked (and measured) again."""
    errors: dict[str, list[str]] = {}
    rechecked = False

    def check(field: str, value):
        try:
            return _CHECKS[field](value, policy)
        except ValueError as error:
            errors.setdefault(_ERROR_FIELD.get(field, field), []).append(str(error))
            return None

    checked = {field: check(field, value) for field, value in values.items()}
    if not errors:
        for field, value in checked.items():
            setattr(policy, field, value)
        errors = _check_whole(policy)
    cost = RulesCost(policy.compile_micros, policy.program_bytes)
    if not errors and policy.rules_digest != rules_digest(policy.patterns, policy.terms, cost):
        # Changed patterns or terms, and ones stored unchecked (before the check existed, or written
        # around the services) are checked (and measured) on any save, which is how an admin
        # clears them. Never compiled in this process: a pattern can take seconds and gigabytes.
        try:
            cost = check_rules(policy.patterns, policy.terms)
        except PatternRefused as refused:
            errors[refused.field] = [str(refused)]
        else:
            policy.compile_micros, policy.program_bytes = cost.compile_micros, cost.program_bytes
            policy.rules_digest = rules_digest(policy.patterns, policy.terms, cost)
            rechecked = True
    if errors:
        first = next(iter(errors))
        raise InvalidRequest(
            f"Invalid value for '{first}': {errors[first][0]}",
            code="validation_error",
            param=first,
            fields=errors,
        )
    return rechecked


def _check_whole(policy: Policy) -> dict[str, list[str]]:
    if (
        not (policy.detectors or policy.patterns or policy.terms or policy.denied_models)
        and policy.max_prompt_chars is None
    ):
        return {
            "non_field_errors": [
                "A policy needs at least one of detectors, patterns, terms, denied_models or "
                "max_prompt_chars."
            ]
        }
    if policy.apply_to_response and policy.action != Action.REDACT:
        return {"apply_to_response": ["Only redact policies apply to responses."]}
    return {}


# --- Field checks, on values parsed (inputs.py): each returns the value to store or raises -------
# ValueError(message).


def _same(value, policy):
    return value


def _distinct(value: list, policy) -> list:
    return list(dict.fromkeys(value))  # duplicates once, in their first place


def _patterns(value: list[str], policy) -> list[str]:
    for position, source in enumerate(value):
        if _GROUP_REFERENCE.search(source):
            raise ValueError(
                f"Pattern {position}: backreferences, recursion and conditionals are not supported."
            )
    return list(dict.fromkeys(value))  # compiled and measured with the terms: _apply


def _uuids(values: Iterable) -> list[uuid.UUID]:
    found = []
    for value in values:
        try:
            found.append(uuid.UUID(str(value)))
        except ValueError:
            continue
    return found


def _scoped(model, message: str):
    """Ids of ``model`` rows of the policy's organization: another organization's id is refused with
    the same words as one that does not exist."""

    def check(value: list[uuid.UUID], policy) -> list[str]:
        ids = [str(item) for item in value]
        found = model.objects.filter(organization_id=policy.organization_id, id__in=ids)
        known = {str(pk) for pk in found.values_list("id", flat=True)}
        if any(value not in known for value in ids):
            raise ValueError(message)
        return list(dict.fromkeys(ids))

    return check


_CHECKS = {
    "name": _same,
    "action": _same,
    "detectors": _distinct,
    "patterns": _patterns,
    "terms": _distinct,
    "denied_models": _distinct,
    "max_prompt_chars": _same,
    "apply_to_response": _same,
    "order": _same,
    "is_active": _same,
    "scope_teams": _scoped(Team, "No such team in this organization."),
    "scope_api_keys": _scoped(ApiKey, "No such API key in this organization."),
    "scope_models": _distinct,
}
# Errors name the fields as the API shows them.
_ERROR_FIELD = {
    "scope_teams": "scope.teams",
    "scope_api_keys": "scope.api_keys",
    "scope_models": "scope.models",
}
