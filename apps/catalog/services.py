from collections.abc import Iterable, Mapping

from django.db import IntegrityError, transaction

from apps.core.errors import Conflict
from apps.core.generations import bump_generation
from apps.organizations.models import Organization

from .models import Deployment, ModelAlias, ModelPrice


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


def _refuse_if_in_use(model_alias: ModelAlias, doing: str) -> None:
    users = aliases_falling_back_to(model_alias)
    if users:
        raise Conflict(
            f"Cannot {doing} '{model_alias.alias}' while other aliases fall back to it "
            f"({', '.join(users)}); remove it from their fallbacks first.",
            code="model_alias_in_use",
        )


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
    try:
        with transaction.atomic():
            model_alias = ModelAlias.objects.create(
                organization=organization,
                alias=alias,
                fallbacks=list(fallbacks),
                description=description,
                is_active=is_active,
            )
    except IntegrityError as error:
        raise _alias_taken(alias) from error
    _replace_deployments(model_alias, deployments)
    bump_generation(organization.id)
    return model_alias


@transaction.atomic
def model_alias_update(*, model_alias: ModelAlias, deployments: Iterable[Mapping] | None = None, **changes):
    new_alias = changes.get("alias")
    if new_alias is not None and new_alias != model_alias.alias:
        # Fallbacks name aliases; a rename would leave them pointing at nothing.
        _refuse_if_in_use(model_alias, "rename")
    for field, value in changes.items():
        setattr(model_alias, field, value)
    try:
        with transaction.atomic():
            model_alias.save(update_fields=[*changes, "updated_at"])
    except IntegrityError as error:
        raise _alias_taken(model_alias.alias) from error
    if deployments is not None:
        _replace_deployments(model_alias, deployments)
    bump_generation(model_alias.organization_id)
    return model_alias


@transaction.atomic
def model_alias_delete(*, model_alias: ModelAlias) -> None:
    _refuse_if_in_use(model_alias, "delete")
    organization_id = model_alias.organization_id
    model_alias.delete()
    bump_generation(organization_id)


@transaction.atomic
def model_price_create(*, organization: Organization, **fields) -> ModelPrice:
    try:
        with transaction.atomic():
            price = ModelPrice.objects.create(organization=organization, **fields)
    except IntegrityError as error:
        raise Conflict(
            "A price version for this model with the same effective_from exists already.",
            code="price_version_exists",
        ) from error
    bump_generation(organization.id)
    return price


@transaction.atomic
def model_price_delete(*, price: ModelPrice) -> None:
    """Only for the admin console, to remove a version entered by mistake."""
    organization_id = price.organization_id
    price.delete()
    bump_generation(organization_id)
