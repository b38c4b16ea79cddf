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


@transaction.atomic
def model_alias_create(
    *,
    organization: Organization,
    alias: str,
    deployments: Iterable[Mapping],
    fallbacks: Iterable[str] = (),
    description: str = "",
) -> ModelAlias:
    try:
        with transaction.atomic():
            model_alias = ModelAlias.objects.create(
                organization=organization, alias=alias, fallbacks=list(fallbacks), description=description
            )
    except IntegrityError as error:
        raise Conflict(f"The model alias '{alias}' exists already.", code="model_alias_taken") from error
    _replace_deployments(model_alias, deployments)
    bump_generation(organization.id)
    return model_alias


@transaction.atomic
def model_alias_update(*, model_alias: ModelAlias, deployments: Iterable[Mapping] | None = None, **changes):
    for field, value in changes.items():
        setattr(model_alias, field, value)
    model_alias.save(update_fields=[*changes, "updated_at"])
    if deployments is not None:
        _replace_deployments(model_alias, deployments)
    bump_generation(model_alias.organization_id)
    return model_alias


@transaction.atomic
def model_alias_delete(*, model_alias: ModelAlias) -> None:
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
