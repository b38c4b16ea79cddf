"""The console's API key pages: list, create (shown once), edit limits, revoke; roles and tenancy."""

import re

import pytest

from apps.keys.models import ApiKey
from apps.limits.models import Limits
from tests.console.conftest import post_form
from tests.factories import PASSWORD, MembershipFactory, TeamFactory, create_api_key

pytestmark = pytest.mark.django_db


def test_a_visitor_without_a_session_is_sent_to_the_sign_in_page(client):
    response = client.get("/console/api-keys/")
    assert response.status_code == 302
    assert response["Location"] == "/console/login/?next=/console/api-keys/"


def test_a_member_lists_the_organizations_keys_and_never_another_organizations(
    console_for, organization, outsider
):
    ours, _ = create_api_key(organization, name="checkout-service")
    create_api_key(outsider.organization, name="their-secret-service")
    client = console_for(organization, "member")
    page = client.get("/console/api-keys/").content.decode()
    assert "checkout-service" in page and ours.key_prefix in page
    assert "their-secret-service" not in page
    assert "Create a key" not in page  # members read only


def test_an_admin_creates_a_key_and_sees_it_once(console_for, organization):
    team = TeamFactory(organization=organization, name="Search")
    client = console_for(organization, "admin")
    response = post_form(
        client,
        "/console/api-keys/new",
        "/console/api-keys/new",
        {
            "name": "search-indexer",
            "team_id": str(team.id),
            "permissions": ["proxy:chat", "proxy:embeddings"],
            "budget_amount_usd": "25.00",
            "budget_period": "weekly",
            "rpm": "60",
        },
    )
    assert response.status_code == 201
    assert response["Cache-Control"].startswith("max-age=0") and "no-store" in response["Cache-Control"]
    page = response.content.decode()
    secret = re.search(r'id="new-key" class="secret" readonly value="([^"]+)"', page).group(1)
    api_key = ApiKey.objects.get(organization=organization, name="search-indexer")
    assert secret.startswith(api_key.key_prefix)
    assert "shown only once" in page
    assert api_key.team == team and api_key.permissions == ["proxy:chat", "proxy:embeddings"]
    limits = Limits.objects.get(api_key=api_key)
    assert (str(limits.budget_usd), limits.budget_period, limits.rpm, limits.tpm) == (
        "25.000000",
        "weekly",
        60,
        None,
    )
    # The key's own page never shows the secret again.
    assert secret not in client.get(f"/console/api-keys/{api_key.id}/").content.decode()


def test_a_refused_create_says_why_and_creates_nothing(console_for, organization, outsider):
    client = console_for(organization, "admin")
    their_team = TeamFactory(organization=outsider.organization)
    response = post_form(
        client,
        "/console/api-keys/new",
        "/console/api-keys/new",
        {"name": "x", "team_id": str(their_team.id), "budget_amount_usd": "-3", "rpm": "many"},
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "No such object in this organization." in page
    assert "budget.amount_usd" in page and "rate_limits.rpm" in page
    assert not ApiKey.objects.filter(name="x").exists()


def test_an_admin_edits_a_keys_limits_and_removes_its_budget(console_for, organization):
    api_key, _ = create_api_key(organization, name="batch")
    client = console_for(organization, "admin")
    page = f"/console/api-keys/{api_key.id}/"
    response = post_form(
        client, page, f"{page}edit", {"name": "batch-jobs", "budget_amount_usd": "10", "tpm": "5000"}
    )
    assert response.status_code == 302
    api_key.refresh_from_db()
    limits = Limits.objects.get(api_key=api_key)
    assert (api_key.name, limits.budget_usd, limits.budget_period, limits.tpm) == (
        "batch-jobs",
        10,
        "monthly",
        5000,
    )
    assert "$10.00 monthly" in client.get(page).content.decode()

    post_form(client, page, f"{page}edit", {"name": "batch-jobs", "budget_amount_usd": ""})
    # Empty fields mean no budget and no limits: the row goes.
    assert not Limits.objects.filter(api_key=api_key).exists()
    assert "$10.00 monthly" not in client.get(page).content.decode()


def test_an_admin_revokes_a_key_and_the_proxy_stops_accepting_it(console_for, organization):
    api_key, _ = create_api_key(organization, name="old")
    client = console_for(organization, "admin")
    page = f"/console/api-keys/{api_key.id}/"
    response = post_form(client, page, f"{page}revoke", {})
    assert response.status_code == 302
    api_key.refresh_from_db()
    assert not api_key.is_active and api_key.revoked_at is not None
    assert "revoked" in client.get(page).content.decode()


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("/console/api-keys/new", {"name": "sneaky"}),
        ("/console/api-keys/{id}/edit", {"name": "renamed"}),
        ("/console/api-keys/{id}/revoke", {}),
    ],
)
def test_a_member_is_refused_every_change_on_the_server(console_for, organization, path, data):
    api_key, _ = create_api_key(organization, name="kept")
    client = console_for(organization, "member")
    response = post_form(client, "/console/api-keys/", path.format(id=api_key.id), data)
    assert response.status_code == 403
    api_key.refresh_from_db()
    assert api_key.is_active and api_key.name == "kept"
    assert ApiKey.objects.filter(organization=organization).count() == 1


@pytest.mark.parametrize("suffix", ["", "edit", "revoke"])
def test_another_organizations_key_answers_404(console_for, organization, outsider, suffix):
    theirs, _ = create_api_key(outsider.organization, name="theirs")
    client = console_for(organization, "owner")
    path = f"/console/api-keys/{theirs.id}/{suffix}"
    response = (
        client.get(path) if not suffix else post_form(client, "/console/api-keys/", path, {"name": "mine"})
    )
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.is_active and theirs.name == "theirs"


def test_a_post_without_the_csrf_token_is_refused(console_for, organization):
    api_key, _ = create_api_key(organization, name="kept")
    client = console_for(organization, "owner")
    response = client.post(f"/console/api-keys/{api_key.id}/revoke", {})
    assert response.status_code == 403
    api_key.refresh_from_db()
    assert api_key.is_active


def test_a_member_of_two_organizations_switches_between_them(console_for, organization, outsider):
    create_api_key(organization, name="first-org-key")
    create_api_key(outsider.organization, name="second-org-key")
    client = console_for(organization, "member")
    MembershipFactory(organization=outsider.organization, user=client.membership.user, role="member")
    assert "first-org-key" in client.get("/console/api-keys/").content.decode()
    post_form(
        client,
        "/console/api-keys/",
        "/console/organization/",
        {"organization_id": str(outsider.organization.id)},
    )
    page = client.get("/console/api-keys/").content.decode()
    assert "second-org-key" in page and "first-org-key" not in page


def test_switching_to_an_organization_one_does_not_belong_to_is_refused(console_for, organization, outsider):
    create_api_key(organization, name="mine")
    client = console_for(organization, "member")
    post_form(
        client,
        "/console/api-keys/",
        "/console/organization/",
        {"organization_id": str(outsider.organization.id)},
    )
    assert "mine" in client.get("/console/api-keys/").content.decode()


def test_password_sign_in_counts_failures_and_locks_out(client, organization, owner, settings):
    settings.GATEWAY_LOGIN_FAILURE_LIMIT = 2
    for _ in range(2):
        response = client.post("/console/login/", {"login": owner.user.email, "password": "wrong"})
        assert response.status_code == 200 and "incorrect" in response.content.decode()
    response = client.post("/console/login/", {"login": owner.user.email, "password": PASSWORD})
    assert response.status_code == 200  # locked out: even the right password is refused
    assert "_auth_user_id" not in client.session
