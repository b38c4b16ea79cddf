"""schemathesis against the management API's own OpenAPI document (/api/v1/schema).

Every operation, signed in as the owner of an organization that has a team, an API key, a provider
key, a model alias and a price (so id paths have something to find; other ids answer 404), with
every schemathesis check: no server error, status codes, content types, response headers and
bodies as documented, schema-violating requests refused, schema-valid ones accepted, methods not
documented answered 405, authentication not ignored, deleted objects gone. Examples are bounded
and derandomized, so a CI run is reproducible and takes well under a minute.

The requests go through Django's WSGI application on the test database, the full middleware and
DRF stack that Daphne serves.
"""

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig

from tests.conftest import login
from tests.factories import (
    DeploymentFactory,
    ModelAliasFactory,
    ModelPriceFactory,
    TeamFactory,
    create_api_key,
    create_provider_key,
)

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "positive_data_acceptance",
    "missing_required_header",
    "unsupported_method",
    "allow_header_conformance",
    "use_after_free",
    "ensure_resource_availability",
    "ignored_auth",
)

# The operations whose validation keeps a rule a schema cannot state: a reference to an object that
# must exist, an order between two values, a host that must resolve, a pattern that must compile,
# a parameter that excludes another in a query string; the rules a schema can state are in it
# (docs/management-api.md, "The schema"). There the API answers 400 naming the field, which
# schemathesis documents as the way to allow such a rejection for one operation (`st explain
# ST202`). An operation leaves this list when its last such rule goes.
REFERENCES_OR_RANGE_RULES = (
    # base_url's host must resolve to an allowed address (its form, http(s) with a host and no
    # credentials, query or fragment, is the schema's pattern; the upstream-url format draws address
    # literals, but the coverage phase sends other hosts).
    "POST /api/v1/provider-keys",
    # team_id names a team of the organization; expires_at is in the future; a fixed budget's
    # ends_at comes after its starts_at.
    "POST /api/v1/api-keys",
    "PATCH /api/v1/api-keys/{id}",  # expires_at in the future; the budget's ends_at after starts_at
    # A budget's ends_at after its starts_at.
    "POST /api/v1/teams",
    "PATCH /api/v1/teams/{id}",
    # Also: the cache's embeddings model names an alias of the catalog, and the semantic cache needs
    # one, judged with the stored settings.
    "PATCH /api/v1/organizations/current",
    # The fallbacks name other aliases of the organization.
    "POST /api/v1/models",
    "PATCH /api/v1/models/{id}",
    # from before to, on a day the month has.
    "POST /api/v1/analytics/reconcile",
    # Query strings: period excludes from/to, to needs from (OpenAPI 3.0 parameters cannot say
    # one excludes another), from before to, on a day the month has; the compliance export
    # requires a range.
    "GET /api/v1/analytics/logs",
    "GET /api/v1/analytics/overview",
    "GET /api/v1/analytics/cache",
    "GET /api/v1/analytics/policy",
    "GET /api/v1/analytics/compliance/export",
    "GET /api/v1/analytics/policy/export",
    # A policy's scope names teams and keys of the organization and its patterns must compile (within
    # the organization's budget of patterns); a dry run's team and api_key name the organization's.
    "POST /api/v1/policies",
    "PATCH /api/v1/policies/{id}",  # also: at least one rule, judged with the stored policy
    "POST /api/v1/policies/dry-run",
    # A webhook URL's host must resolve to an allowed address.
    "POST /api/v1/organizations/current/webhooks",
    "PATCH /api/v1/organizations/current/webhooks/{id}",
    # A version's tags must compile and its variables agree; a label names an existing version; a
    # render's variables match the version.
    "POST /api/v1/prompt-templates/{template_id}/versions",
    "PUT /api/v1/prompt-templates/{template_id}/labels/{name}",
    "POST /api/v1/prompt-templates/{id}/render",
    # An experiment's variants name aliases and versions that exist, with distinct names and weights
    # summing above 0; its target names an alias or template in characters Python calls printable
    # (the schema states the control characters, not Unicode's other unprintable ones).
    "POST /api/v1/experiments",
    # The first feedback on a request needs a score or a label; a later one may change only the
    # comment, so whether a body without both is taken depends on what is stored.
    "POST /api/v1/feedback",
    # The current password must be the account's, and the new one pass the password validators.
    "POST /api/v1/auth/password",
)
POSITIVE_STATUSES = ["2xx", "3xx", "403", "404", "409", "429", "5xx"]
CONFIG = SchemathesisConfig.from_dict(
    {
        "generation": {"max-examples": 12, "deterministic": True},
        "checks": {name: {"enabled": True} for name in CHECKS},
        "operations": [
            {
                "include-name": name,
                "checks": {"positive_data_acceptance": {"expected-statuses": [*POSITIVE_STATUSES, "400"]}},
            }
            for name in REFERENCES_OR_RANGE_RULES
        ],
    }
)

# A base URL the API accepts resolves to a public address; a generated host name would not resolve
# here (no DNS in the suite), so valid ones are drawn with address literals.
schemathesis.openapi.format(
    "upstream-url",
    st.builds(
        lambda scheme, address, path: f"{scheme}://{address}{path}",
        st.sampled_from(["http", "https"]),
        st.sampled_from(["8.8.8.8", "1.1.1.1", "[2001:4860:4860::8888]", "8.8.4.4:8443"]),
        st.sampled_from(["", "/v1", "/openai/deployments"]),
    ),
)


# Loaded when the module is collected: generating the document reads no database.
schema = schemathesis.openapi.from_wsgi("/api/v1/schema?format=json", get_wsgi_application(), config=CONFIG)


@pytest.fixture
def owner_token(owner, api_client) -> str:
    organization = owner.organization
    TeamFactory(organization=organization)
    create_api_key(organization)
    create_provider_key(organization)
    DeploymentFactory(alias=ModelAliasFactory(organization=organization))
    ModelPriceFactory(organization=organization)
    return login(api_client, owner.user.email)["access"]


@pytest.mark.django_db
@schema.parametrize()
@settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
def test_the_management_api_answers_as_its_schema_says(case, owner_token, _keep_the_test_connection):
    # A case whose point is a missing Authorization header goes without it: adding it back would make
    # the API's (right) acceptance look like a schema-violating request accepted.
    negated = case.operation.schema.is_security_param_negated(case)
    case.call_and_validate(headers={} if negated else {"Authorization": f"Bearer {owner_token}"})
