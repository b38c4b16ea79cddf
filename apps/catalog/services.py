"""Writes of the organization's model catalog: aliases with their deployments and fallbacks, price
versions, the default price for unpriced models. Each write bumps the configuration generation, so
every proxy worker sees it on its next request.

The input's types and shapes are parsed here, by inputs.py (the API's schema too), for the API, the
admin and the console alike; the services then check only what a schema cannot say
(``model_alias_check``, ``model_price_check``)."""

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.core.api.serializers import validated
from apps.core.errors import Conflict, InvalidRequest
from apps.core.generations import bump_generation
from apps.core.unique import unique_or_conflict
from apps.organizations.models import Organization

from .inputs import ModelAliasInputSerializer, ModelPriceInputSerializer
from .models import DefaultPrice, Deployment, ModelAlias, ModelPrice
from .selectors import default_price_of


def _replace_deployments(alias: ModelAlias, deployments: Iterable[Mapping]) -> None:
    alias.deployments.all().delete()
    Deployment.objects.bulk_create(
        Deployment(alias=alias, priority=deployment.get("priority", index), **_deployment_fields(deployment))
        for index, deployment in enumerate(deployments)
    )


def _deployment_fields(deployment: Mapping) -> dict:
    return {"provider": deployment["provider"], "upstream_model": deployment["upstream_model"]}


def _alias_taken(alias: str) -> Conflict:
    return Conflict(f"The model alias '{alias}' exists already.", code="model_alias_taken")


def aliases_falling_back_to(model_alias: ModelAlias) -> list[str]:
    """The organization's other aliases that name ``model_alias`` among their fallbacks."""
    # Filtered here rather than with a JSON containment lookup, which SQLite does not support; a
    # catalog holds tens of aliases, not thousands.
    others = (
        ModelAlias.objects.filter(organization_id=model_alias.organization_id)
        .exclude(pk=model_alias.pk)
        .values_list("alias", "fallbacks")
    )
    return sorted(alias for alias, fallbacks in others if model_alias.alias in fallbacks)


def fallback_users_outside(model_aliases: Iterable[ModelAlias]) -> dict[ModelAlias, list[str]]:
    """For each alias of a batch being deleted, the aliases outside the batch that fall back to it
    (an alias of the batch may fall back to another of it); aliases nobody outside uses are left out."""
    model_aliases = list(model_aliases)
    users_outside = {}
    for model_alias in model_aliases:
        organization_id = model_alias.organization_id
        batch = {other.alias for other in model_aliases if other.organization_id == organization_id}
        users = [user for user in aliases_falling_back_to(model_alias) if user not in batch]
        if users:
            users_outside[model_alias] = users
    return users_outside


def _refuse_if_in_use(model_alias: ModelAlias, doing: str, users: list[str]) -> None:
    if users:
        raise Conflict(
            f"Cannot {doing} '{model_alias.alias}' while other aliases fall back to it "
            f"({', '.join(users)}); remove it from their fallbacks first.",
            code="model_alias_in_use",
        )


class InvalidFallbacks(InvalidRequest):
    """A 400 ``validation_error`` naming ``fallbacks``, as a serializer's would."""

    code = "validation_error"

    def __init__(self, message: str) -> None:
        super().__init__(f"Invalid value for 'fallbacks': {message}", fields={"fallbacks": [message]})


def check_fallbacks(*, organization_id, alias: str, fallbacks: Iterable[str]) -> None:
    """The rule for an alias's fallbacks, for every way in (API, admin console, shell): other
    aliases of the same organization, never the alias itself. Another organization's alias reads
    exactly like one that does not exist."""
    fallbacks = list(fallbacks)
    if not fallbacks:
        return
    if alias in fallbacks:
        raise InvalidFallbacks("An alias cannot fall back to itself.")
    known = set(
        ModelAlias.objects.filter(organization_id=organization_id, alias__in=fallbacks).values_list(
            "alias", flat=True
        )
    )
    missing = [name for name in fallbacks if name not in known]
    if missing:
        raise InvalidFallbacks(f"No such model alias: {', '.join(missing)}.")


def model_alias_check(
    *,
    organization_id,
    data: Mapping,
    partial: bool = False,
    model_alias: ModelAlias | None = None,
) -> dict[str, Any]:
    """``data`` (the API's body, inputs.py ``ModelAliasInputSerializer``; ``partial``: a PATCH's, only
    the fields it names) as the alias ``model_alias`` (None: a new one) would store it, then what a
    schema cannot say: a rename of an alias others fall back to (409 ``model_alias_in_use``),
    fallbacks that name other aliases of the organization (``check_fallbacks``), a name taken (409
    ``model_alias_taken``). The admin's form runs it before saving, so its page shows the refusal on
    its field."""
    values = dict(validated(ModelAliasInputSerializer, data, partial=partial))
    new_alias = values.get("alias")
    if model_alias is not None and new_alias is not None and new_alias != model_alias.alias:
        # Fallbacks name aliases; a rename would leave them pointing at nothing.
        _refuse_if_in_use(model_alias, "rename", aliases_falling_back_to(model_alias))
    alias = new_alias if new_alias is not None else getattr(model_alias, "alias", None)
    if alias is not None and (model_alias is None or "fallbacks" in values or new_alias is not None):
        fallbacks = values.get("fallbacks", () if model_alias is None else model_alias.fallbacks)
        check_fallbacks(organization_id=organization_id, alias=alias, fallbacks=fallbacks)
    if new_alias is not None:
        taken = ModelAlias.objects.filter(organization_id=organization_id, alias=new_alias)
        if model_alias is not None:
            taken = taken.exclude(pk=model_alias.pk)
        if taken.exists():
            raise _alias_taken(new_alias)
    return values


@transaction.atomic
def model_alias_create(*, organization: Organization, data: Mapping) -> ModelAlias:
    """``data``: the alias with its deployments and fallbacks, as the API's body has it
    (``model_alias_check``)."""
    values = model_alias_check(organization_id=organization.id, data=data)
    deployments = values.pop("deployments")
    with unique_or_conflict(_alias_taken(values["alias"])):  # a concurrent writer took the name
        model_alias = ModelAlias.objects.create(organization=organization, **values)
    _replace_deployments(model_alias, deployments)
    bump_generation(organization.id)
    return model_alias


@transaction.atomic
def model_alias_update(*, model_alias: ModelAlias, data: Mapping) -> ModelAlias:
    """Applies ``data`` (any of ``alias``, ``description``, ``deployments``, ``fallbacks``,
    ``is_active``, as the API's PATCH body has them; ``model_alias_check``): deployments named are
    replaced whole."""
    changes = model_alias_check(
        organization_id=model_alias.organization_id, data=data, partial=True, model_alias=model_alias
    )
    deployments = changes.pop("deployments", None)
    for field, value in changes.items():
        setattr(model_alias, field, value)
    with unique_or_conflict(_alias_taken(model_alias.alias)):
        model_alias.save(update_fields=[*changes, "updated_at"])
    if deployments is not None:
        _replace_deployments(model_alias, deployments)
    bump_generation(model_alias.organization_id)
    return model_alias


def model_alias_delete(*, model_alias: ModelAlias) -> None:
    model_alias_delete_many(model_aliases=[model_alias])


@transaction.atomic
def model_alias_delete_many(*, model_aliases: Iterable[ModelAlias]) -> None:
    """Deletes the aliases together, or none of them when an alias left behind falls back to one."""
    model_aliases = list(model_aliases)
    for model_alias, users in fallback_users_outside(model_aliases).items():
        _refuse_if_in_use(model_alias, "delete", users)
    for model_alias in model_aliases:
        model_alias.delete()
    for organization_id in {model_alias.organization_id for model_alias in model_aliases}:
        bump_generation(organization_id)


def model_price_check(*, data: Mapping, partial: bool = False) -> dict[str, Any]:
    """``data`` (the API's body, inputs.py ``ModelPriceInputSerializer``; ``partial``: only the fields
    it names) as a price version stores it. The admin's form runs it before saving, so its page shows
    a refusal on its field."""
    return dict(validated(ModelPriceInputSerializer, data, partial=partial))


@transaction.atomic
def model_price_create(*, organization: Organization, data: Mapping) -> ModelPrice:
    """``data``: the version as the API's body has it (``model_price_check``); a version of the same
    model and ``effective_from`` is a 409."""
    values = model_price_check(data=data)
    price_exists = Conflict(
        "A price version for this model with the same effective_from exists already.",
        code="price_version_exists",
    )
    with unique_or_conflict(price_exists):
        price = ModelPrice.objects.create(organization=organization, **values)
    bump_generation(organization.id)
    return price


@transaction.atomic
def model_price_delete(*, price: ModelPrice) -> None:
    """Only for the admin console, to remove a version entered by mistake."""
    organization_id = price.organization_id
    price.delete()
    bump_generation(organization_id)


def default_price_set(*, organization: Organization, price: Mapping | None) -> DefaultPrice | None:
    """Sets the organization's default price for unpriced models from now on: ``price`` is
    ``{"input_per_mtok": Decimal, "output_per_mtok": Decimal}`` (USD per million tokens) as inputs.py
    ``DefaultPriceInputSerializer`` parses it (the organization's settings do, where the API and the
    console write it), or None for no default (requests for unpriced models are then refused where
    a budget applies). A new version each time, so past requests keep the price they were charged;
    setting what is in force already writes nothing."""
    now = timezone.now()
    values = None if price is None else (price["input_per_mtok"], price["output_per_mtok"])
    current = default_price_of(organization.id, now)
    if values is None and current is None:
        return None
    if current is not None and values is not None and (current.input, current.output) == values:
        return None
    version = DefaultPrice.objects.create(
        organization=organization,
        input_per_mtok=None if values is None else values[0],
        output_per_mtok=None if values is None else values[1],
        effective_from=now,
    )
    bump_generation(organization.id)
    return version
