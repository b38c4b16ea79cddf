import pytest

from apps.catalog import services as catalog_services
from apps.experiments import services


def make_alias(organization, alias: str, upstream: str, provider: str = "openai"):
    return catalog_services.model_alias_create(
        organization=organization,
        data={"alias": alias, "deployments": [{"provider": provider, "upstream_model": upstream}]},
    )


@pytest.fixture
def aliases(organization):
    """The organization's ``chat`` (gpt-4o-mini) and ``chat-large`` (gpt-4o) aliases."""
    return make_alias(organization, "chat", "gpt-4o-mini"), make_alias(organization, "chat-large", "gpt-4o")


def model_experiment(organization, *, weights=(50, 50), name: str = "bigger model", **variant_b):
    variant_b = variant_b or {"model": "chat-large"}
    return services.experiment_create(
        organization=organization,
        data={
            "name": name,
            "target": {"model": "chat"},
            "variants": [
                {"name": "control", "weight": weights[0]},
                {"name": "large", "weight": weights[1], **variant_b},
            ],
        },
    )
