from collections.abc import Iterable, Mapping
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from apps.core.errors import Conflict, InvalidRequest
from apps.core.generations import bump_generation
from apps.core.unique import unique_or_conflict
from apps.organizations.models import Organization

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


@transaction.atomic
def model_alias_create(
    *,
    organization: Organization,
    alias: str,
    deployments: Iterable[Mapping],
    fallbacks: Iterable[str] = (),
    description: str = "",
    is_active: bool = True,
) -> ModelAlias:
    check_fallbacks(organization_id=organization.id, alias=alias, fallbacks=fallbacks)
    with unique_or_conflict(_alias_taken(alias)):
        model_alias = ModelAlias.objects.create(
            organization=organization,
            alias=alias,
            fallbacks=list(fallbacks),
            description=description,
            is_active=is_active,
        )
    _replace_deployments(model_alias, deployments)
    bump_generation(organization.id)
    return model_alias


@transaction.atomic
def model_alias_update(*, model_alias: ModelAlias, deployments: Iterable[Mapping] | None = None, **changes):
    new_alias = changes.get("alias")
    if new_alias is not None and new_alias != model_alias.alias:
        # Fallbacks name aliases; a rename would leave them pointing at nothing.
        _refuse_if_in_use(model_alias, "rename", aliases_falling_back_to(model_alias))
    if "fallbacks" in changes or new_alias is not None:
        check_fallbacks(
            organization_id=model_alias.organization_id,
            alias=new_alias if new_alias is not None else model_alias.alias,
            fallbacks=changes.get("fallbacks", model_alias.fallbacks),
        )
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


@transaction.atomic
def model_price_create(*, organization: Organization, **fields) -> ModelPrice:
    price_exists = Conflict(
        "A price version for this model with the same effective_from exists already.",
        code="price_version_exists",
    )
    with unique_or_conflict(price_exists):
        price = ModelPrice.objects.create(organization=organization, **fields)
    bump_generation(organization.id)
    return price


@transaction.atomic
def model_price_delete(*, price: ModelPrice) -> None:
    """Only for the admin console, to remove a version entered by mistake."""
    organization_id = price.organization_id
    price.delete()
    bump_generation(organization_id)


MAX_PRICE_PER_MTOK = Decimal("100000000")


def default_price_set(*, organization: Organization, price: Mapping | None) -> DefaultPrice | None:
    """Sets the organization's default price for unpriced models from now on: ``price`` is
    ``{"input_per_mtok": Decimal, "output_per_mtok": Decimal}`` (USD per million tokens), or None for
    no default (requests for unpriced models are then refused where a budget applies). A new version
    each time, so past requests keep the price they were charged; setting what is in force already
    writes nothing."""
    now = timezone.now()
    if price is not None:
        values = {}
        for name in ("input_per_mtok", "output_per_mtok"):
            value = price.get(name)
            if not isinstance(value, Decimal) or not value.is_finite() or not 0 <= value < MAX_PRICE_PER_MTOK:
                message = 'A price in USD per million tokens, from 0, as a decimal string such as "2.50".'
                raise InvalidRequest(
                    f"Invalid value for 'default_price.{name}': {message}",
                    code="validation_error",
                    param=f"default_price.{name}",
                    fields={f"default_price.{name}": [message]},
                )
            values[name] = value
        unknown = set(price) - set(values)
        if unknown:
            message = f"Unknown field(s): {', '.join(sorted(unknown))}."
            raise InvalidRequest(message, code="validation_error", fields={"default_price": [message]})
    current = default_price_of(organization.id, now)
    if price is None and current is None:
        return None
    if (
        current is not None
        and price is not None
        and (current.input, current.output)
        == (
            values["input_per_mtok"],
            values["output_per_mtok"],
        )
    ):
        return None
    version = DefaultPrice.objects.create(
        organization=organization,
        input_per_mtok=None if price is None else values["input_per_mtok"],
        output_per_mtok=None if price is None else values["output_per_mtok"],
        effective_from=now,
    )
    bump_generation(organization.id)
    return version
