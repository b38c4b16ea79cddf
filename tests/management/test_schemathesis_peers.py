"""schemathesis's object-level authorization check: two organizations' owners, and neither reads
what the other owns.

The check needs sequences of requests (the owner creates or lists an object, then reads it; the
other owner replays the read), so it runs in schemathesis's stateful mode: a state machine built
from the links schemathesis infers between the operations, signed in as the owner, with the
outsider as the peer it probes each successful read with. Each scenario starts from the same
database (a savepoint rolled back at its end), so Hypothesis replays one the way it first ran.
"""

import json

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from tests.audit.entries import AuditEntryFactory
from tests.conftest import login
from tests.factories import (
    DeploymentFactory,
    ModelAliasFactory,
    ModelPriceFactory,
    TeamFactory,
    create_api_key,
    create_provider_key,
)

OWNER, OUTSIDER = "owner", "outsider"


def a_populated_organization(membership) -> None:
    organization = membership.organization
    TeamFactory(organization=organization)
    create_api_key(organization)
    create_provider_key(organization)
    DeploymentFactory(alias=ModelAliasFactory(organization=organization))
    ModelPriceFactory(organization=organization)
    # Recent, so the log list's default period shows it.
    AuditEntryFactory(organization=organization, created_at=timezone.now())


@pytest.fixture
def outsider_token(outsider, api_client) -> str:
    a_populated_organization(outsider)
    return login(api_client, outsider.user.email)["access"]


@pytest.fixture
def owner_token(owner, outsider_token, api_client) -> str:
    """What _keep_the_test_connection waits for: both organizations are there and signed in."""
    a_populated_organization(owner)
    return login(api_client, owner.user.email)["access"]


def peers_schema(wfc_path, tokens: dict[str, str]):
    """The management API's schema, signed in as the owner, with the outsider as the probing peer."""
    wfc_path.write_text(
        json.dumps(
            {
                "auth": [
                    {"name": name, "fixedHeaders": [{"name": "Authorization", "value": f"Bearer {token}"}]}
                    for name, token in tokens.items()
                ]
            }
        )
    )
    config = SchemathesisConfig.from_dict(
        {
            "auth": {"wfc": {"path": str(wfc_path), "user": OWNER, "peers": [OWNER, OUTSIDER]}},
            "checks": {"enabled": False, "object_level_authorization": {"enabled": True}},
        }
    )
    return schemathesis.openapi.from_wsgi("/api/v1/schema?format=json", get_wsgi_application(), config=config)


def state_machine(schema):
    class EachScenarioFromTheSameDatabase(schema.as_state_machine()):
        def setup(self):
            self.savepoint = transaction.savepoint()

        def teardown(self):
            transaction.savepoint_rollback(self.savepoint)

    return EachScenarioFromTheSameDatabase


@pytest.mark.django_db
def test_no_owner_reads_another_organizations_objects(
    owner_token,
    outsider_token,
    tmp_path,
    _keep_the_test_connection,
):
    tokens = {OWNER: owner_token, OUTSIDER: outsider_token}
    machine = state_machine(peers_schema(tmp_path / "peers.wfc.json", tokens))
    machine.run(
        settings=settings(
            max_examples=100,
            stateful_step_count=6,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )
