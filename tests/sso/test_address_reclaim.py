"""Issue 19, finding 2, second round: an address squatted through an invitation link is reclaimed by
its owner through single sign-on of a domain its organization proved.

Organization B's owner invites alice@acme.test, opens the link signed out and chooses a password: an
account with Acme's address exists, and B's owner holds its password. Alice's own proof is Acme's
identity provider (acme.test proved): her sign-in takes the account over (its password, two-factor
and sessions end, it leaves B) and joins Acme. Without a proved domain nothing changes."""

import pytest
from allauth.mfa.models import Authenticator
from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret
from django.test import Client
from rest_framework.test import APIClient

from apps.accounts.models import User
from apps.organizations.models import Membership
from apps.teams.models import TeamMembership
from tests.conftest import login
from tests.factories import MembershipFactory, OrganizationFactory, TeamFactory
from tests.sso.flow import (
    browser,
    callback_of,
    confirm,
    connect,
    initiate,
    open_url,
    password_sign_in,
    signed_in_user_id,
    sso_through_api,
)

pytestmark = pytest.mark.django_db

INVITATIONS = "/api/v1/organizations/current/invitations"
SQUATTER_PASSWORD = "mallory's passphrase for alice"


def api_session_of(email: str, password: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {login(client, email, password)['access']}")
    return client


def opened_by_its_inviter(inviter: APIClient, email: str, password: str) -> Client:
    """``inviter`` invites ``email`` and opens the link themselves, signed out, choosing ``password``:
    the browser that did it, signed in to the console as the new account."""
    link = inviter.post(INVITATIONS, {"email": email}, format="json").json()["accept_url"]
    console = Client()
    response = console.post(link.removeprefix("http://testserver"), {"password": password})
    assert response.status_code == 302, response.content
    return console


@pytest.fixture
def acme(oidc_provider):
    organization = OrganizationFactory(name="Acme", slug="acme", plan="growth")
    MembershipFactory(organization=organization, role="owner")
    return connect(organization, oidc_provider, default_role="admin")


@pytest.fixture
def b_owner(db):
    return MembershipFactory(role="owner", user__email="mallory@b.test", organization__name="Org B")


def test_the_addresss_owner_reclaims_a_squatted_account_through_a_proved_domains_sso(
    api_client, acme, oidc_provider, b_owner
):
    b_api = api_session_of(b_owner.user.email, "a-long-test-password")
    squatters_console = opened_by_its_inviter(b_api, "alice@acme.test", SQUATTER_PASSWORD)
    squatter = User.objects.get(email="alice@acme.test")
    assert not squatter.email_verified
    squatters_api = api_session_of("alice@acme.test", SQUATTER_PASSWORD)
    TOTP.activate(squatter, generate_totp_secret())  # the squatter's second factor would lock Alice out
    TeamMembership.objects.create(team=TeamFactory(organization=b_owner.organization), user=squatter)

    client = browser()
    response = sso_through_api(api_client, oidc_provider, client)
    assert response.status_code == 302 and response["Location"] == "/console/"
    assert signed_in_user_id(client) == str(squatter.pk)
    alice = User.objects.get(pk=squatter.pk)
    assert alice.email_verified and not alice.has_usable_password()
    assert not Authenticator.objects.filter(user=alice).exists()
    assert [(m.organization_id, m.role) for m in Membership.objects.filter(user=alice)] == [
        (acme.organization_id, "admin")
    ]
    assert not alice.team_memberships.exists()
    # The squatter is out: their API session, their console session and their password.
    response = squatters_api.get("/api/v1/organizations/current")
    assert response.status_code == 401 and response.json()["error"]["code"] == "password_changed"
    assert squatters_console.get("/console/dashboard/")["Location"].startswith("/console/login/")
    assert (
        password_sign_in(browser(), "alice@acme.test", SQUATTER_PASSWORD).status_code == 200
    )  # the form again
    assert (
        APIClient()
        .post(
            "/api/v1/auth/login", {"email": "alice@acme.test", "password": SQUATTER_PASSWORD}, format="json"
        )
        .status_code
        == 401
    )
    # B's owner still sees their own invitation as accepted; B lost the member.
    assert b_api.get(INVITATIONS).json()["results"][0]["status"] == "accepted"
    assert not Membership.objects.filter(organization=b_owner.organization, user=alice).exists()


def test_an_unproved_domain_reclaims_nothing(api_client, oidc_provider, b_owner):
    organization = OrganizationFactory(name="Acme", slug="acme", plan="growth")
    connect(organization, oidc_provider, proved=False)
    b_api = api_session_of(b_owner.user.email, "a-long-test-password")
    opened_by_its_inviter(b_api, "alice@acme.test", SQUATTER_PASSWORD)

    # An unproved domain routes no email: the sign-in is started by the organization's name.
    client = browser()
    response = confirm(
        client, open_url(client, callback_of(oidc_provider, initiate(api_client, organization="acme")))
    )
    assert response.status_code == 403 and "has not proved" in response.content.decode()
    account = User.objects.get(email="alice@acme.test")
    assert not account.email_verified and account.check_password(SQUATTER_PASSWORD)
    assert Membership.objects.filter(organization=b_owner.organization, user=account).exists()


def test_an_unverified_member_of_the_connections_organization_signs_in_as_it_is(
    api_client, acme, oidc_provider
):
    """Acme's own link made the account and its membership: Acme's identity provider signs it in
    without taking anything away (its password stays, it stays unverified)."""
    acme_owner = Membership.objects.get(organization=acme.organization, role="owner").user
    acme_api = api_session_of(acme_owner.email, "a-long-test-password")
    opened_by_its_inviter(acme_api, "alice@acme.test", "alice's own passphrase")

    client = browser()
    assert sso_through_api(api_client, oidc_provider, client).status_code == 302
    alice = User.objects.get(email="alice@acme.test")
    assert signed_in_user_id(client) == str(alice.pk)
    assert alice.check_password("alice's own passphrase") and not alice.email_verified
    assert Membership.objects.get(user=alice).role == "member"


def test_a_verified_account_of_another_organization_is_still_never_taken_over(
    api_client, acme, oidc_provider, b_owner
):
    """Only an address nobody proved is reclaimed: an account the operator made (or one that existed
    before addresses were verified) is refused as before, and keeps everything."""
    elsewhere = MembershipFactory(user__email="alice@acme.test", role="owner")
    client = browser()
    response = sso_through_api(api_client, oidc_provider, client)
    assert response.status_code == 403 and "not a member of Acme" in response.content.decode()
    elsewhere.user.refresh_from_db()
    assert elsewhere.user.has_usable_password()
    assert list(Membership.objects.filter(user=elsewhere.user)) == [elsewhere]


def test_an_account_made_by_single_sign_on_has_a_verified_address(api_client, acme, oidc_provider):
    client = browser()
    assert sso_through_api(api_client, oidc_provider, client).status_code == 302
    assert User.objects.get(email="alice@acme.test").email_verified
