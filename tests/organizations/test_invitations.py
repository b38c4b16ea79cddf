"""Invitations through the management API: an owner invites, lists and revokes; the invited account
lists its own and accepts or declines; expiry; an outsider sees nothing; the answer never says
whether the address has an account."""

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts.models import User
from apps.organizations.models import Membership
from tests.conftest import login
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

INVITATIONS = "/api/v1/organizations/current/invitations"
MINE = "/api/v1/invitations"


def signed_in(user) -> APIClient:
    """An API session of ``user`` in one of their own organizations."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {login(client, user.email)['access']}")
    return client


def invite(client, email: str, role: str = "member"):
    return client.post(INVITATIONS, {"email": email, "role": role}, format="json")


def test_an_invitation_answers_the_same_whether_or_not_the_address_has_an_account(session_client, outsider):
    shapes = []
    for email in ("nobody-yet@example.com", outsider.user.email):
        response = invite(session_client, email, "admin")
        assert response.status_code == 201
        body = response.json()
        assert body["status"] == "pending" and body["role"] == "admin"
        assert body["accept_url"].startswith("http://testserver/console/invitations/")
        shapes.append(sorted(body))
    assert shapes[0] == shapes[1]
    listed = session_client.get(INVITATIONS).json()["results"]
    assert {i["email"] for i in listed} == {"nobody-yet@example.com", outsider.user.email}
    assert all("accept_url" not in i for i in listed)  # the link is shown once
    assert (
        not Membership.objects.filter(user=outsider.user).exclude(organization=outsider.organization).exists()
    )


def test_the_invited_account_accepts_and_joins_with_the_role(session_client, organization, outsider):
    invitation = invite(session_client, outsider.user.email.upper(), "admin").json()
    theirs = signed_in(outsider.user)
    received = theirs.get(MINE).json()
    assert [(i["id"], i["organization"]["name"], i["role"]) for i in received] == [
        (invitation["id"], organization.name, "admin")
    ]
    response = theirs.post(f"{MINE}/{invitation['id']}/accept")
    assert response.status_code == 200 and response.json()["role"] == "admin"
    assert Membership.objects.get(organization=organization, user=outsider.user).role == "admin"
    assert session_client.get(f"{INVITATIONS}/{invitation['id']}").json()["status"] == "accepted"
    # Answered once: accepting again, or revoking it, is refused.
    assert theirs.post(f"{MINE}/{invitation['id']}/accept").status_code == 404
    response = session_client.delete(f"{INVITATIONS}/{invitation['id']}")
    assert response.status_code == 409 and response.json()["error"]["code"] == "invitation_closed"


def test_a_declined_or_revoked_invitation_makes_no_member(session_client, organization, outsider):
    theirs = signed_in(outsider.user)
    first = invite(session_client, outsider.user.email).json()
    assert theirs.post(f"{MINE}/{first['id']}/decline").status_code == 204
    second = invite(session_client, outsider.user.email).json()
    assert session_client.delete(f"{INVITATIONS}/{second['id']}").status_code == 204
    assert theirs.post(f"{MINE}/{second['id']}/accept").status_code == 404
    assert theirs.get(MINE).json() == []
    statuses = {i["id"]: i["status"] for i in session_client.get(INVITATIONS).json()["results"]}
    assert statuses == {first["id"]: "declined", second["id"]: "revoked"}
    assert not Membership.objects.filter(organization=organization, user=outsider.user).exists()


def test_only_the_invited_address_can_answer(session_client, organization, outsider):
    invitation = invite(session_client, "someone@example.com").json()
    stranger = signed_in(outsider.user)
    assert stranger.get(MINE).json() == []
    assert stranger.post(f"{MINE}/{invitation['id']}/accept").status_code == 404
    assert stranger.post(f"{MINE}/not-an-id/accept").status_code == 404  # not a 500
    assert not Membership.objects.filter(organization=organization, user=outsider.user).exists()


def test_an_invitation_expires(session_client, organization, outsider, settings):
    settings.GATEWAY_INVITATION_TTL_DAYS = 7
    invitation = invite(session_client, outsider.user.email).json()
    with time_machine.travel(timezone.now() + timedelta(days=7, seconds=1)):
        theirs, owners = signed_in(outsider.user), signed_in(organization.memberships.get(role="owner").user)
        assert theirs.get(MINE).json() == []
        assert theirs.post(f"{MINE}/{invitation['id']}/accept").status_code == 404
        assert owners.get(f"{INVITATIONS}/{invitation['id']}").json()["status"] == "expired"
        # An expired invitation does not stop a new one.
        assert invite(owners, outsider.user.email).status_code == 201
    assert not Membership.objects.filter(organization=organization, user=outsider.user).exists()


def test_refused_invitations(session_client, organization):
    member = MembershipFactory(organization=organization, role="member")
    cases = [
        ({"email": "not-an-email"}, 400, "validation_error"),
        ({"email": "x@example.com", "role": "root"}, 400, "validation_error"),
        ({"email": member.user.email}, 409, "already_a_member"),
        ({}, 400, "validation_error"),
    ]
    for body, status, code in cases:
        response = session_client.post(INVITATIONS, body, format="json")
        assert response.status_code == status, body
        assert response.json()["error"]["code"] == code, body
    assert invite(session_client, "twice@example.com").status_code == 201
    response = invite(session_client, "twice@example.com")
    assert response.status_code == 409 and response.json()["error"]["code"] == "invitation_pending"


@pytest.mark.parametrize("role", ["member", "admin"])
def test_only_owners_invite_or_read_invitations(client_for, organization, role):
    client = client_for(organization, role)
    assert invite(client, "sneaky@example.com").status_code == 403
    assert client.get(INVITATIONS).status_code == 403


def test_an_outsider_never_sees_or_revokes_the_organizations_invitations(session_client, outsider):
    invitation = invite(session_client, "someone@example.com").json()
    theirs = signed_in(outsider.user)
    assert theirs.get(INVITATIONS).json()["results"] == []
    assert theirs.get(f"{INVITATIONS}/{invitation['id']}").status_code == 404
    assert theirs.delete(f"{INVITATIONS}/{invitation['id']}").status_code == 404
    assert session_client.get(f"{INVITATIONS}/{invitation['id']}").json()["status"] == "pending"


def test_a_new_person_joins_by_choosing_a_password_with_the_link(session_client, organization):
    link = invite(session_client, "newcomer@example.com", "admin").json()["accept_url"]
    path = link.removeprefix("http://testserver")
    browser = Client()
    page = browser.get(path)
    assert page.status_code == 200 and organization.name in page.content.decode()
    response = browser.post(path, {"password": "123"})
    assert response.status_code == 400 and "too short" in response.content.decode()
    response = browser.post(path, {"password": "a long and fresh passphrase"})
    assert response.status_code == 302
    user = Membership.objects.get(organization=organization, user__email="newcomer@example.com").user
    assert user.check_password("a long and fresh passphrase")
    assert browser.get(path).status_code == 410  # used
    assert User.objects.filter(email="newcomer@example.com").count() == 1


# --- Squatting an address through one's own invitation link (issue 19, finding 2, second round) ----
# Creating an account with an invitation's link proves only that one holds the link: the gateway sends
# no mail, so the inviter holds it too. Such an account's address is unverified until proved.


def api_session(email: str, password: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {login(client, email, password)['access']}")
    return client


def sign_up_through_the_link(accept_url: str, password: str = "a long and fresh passphrase") -> Client:
    """A signed-out browser opens ``accept_url`` and chooses ``password``; it is signed in after."""
    browser = Client()
    response = browser.post(accept_url.removeprefix("http://testserver"), {"password": password})
    assert response.status_code == 302, response.content
    return browser


def test_an_owner_cannot_squat_an_address_through_their_own_link_and_take_another_organizations_invitation(
    session_client, organization, outsider
):
    """The outside check, replayed: B's owner invites newhire@a.test, opens the link signed out and
    chooses a password; A's owner later invites the same address as admin. The account B's owner
    made neither sees nor accepts A's invitation: only A's own link would, and B's owner has not got
    it."""
    b_owner = signed_in(outsider.user)
    b_link = invite(b_owner, "newhire@a.test").json()["accept_url"]
    sign_up_through_the_link(b_link, "mallory's passphrase for newhire")
    a_invitation = invite(session_client, "newhire@a.test", "admin").json()

    squatter = api_session("newhire@a.test", "mallory's passphrase for newhire")
    assert squatter.get(MINE).json() == []  # nothing says that A invited the address, or as what
    response = squatter.post(f"{MINE}/{a_invitation['id']}/accept")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert squatter.post(f"{MINE}/{a_invitation['id']}/decline").status_code == 404
    assert not Membership.objects.filter(organization=organization, user__email="newhire@a.test").exists()
    assert session_client.get(f"{INVITATIONS}/{a_invitation['id']}").json()["status"] == "pending"
    # A session of the squatting account reaches B only.
    assert squatter.get("/api/v1/organizations/current").json()["id"] == str(outsider.organization.id)


def link_path(invitation: dict) -> str:
    return invitation["accept_url"].removeprefix("http://testserver")


def console_post(browser: Client, path: str, data: dict):
    """A form post from the page at ``path`` (its CSRF token included), as the console's buttons do."""
    page = browser.get(path)
    assert page.status_code == 200, page.content
    return browser.post(path, {**data, "csrfmiddlewaretoken": browser.cookies["csrftoken"].value})


@pytest.fixture
def admin_browser(db) -> Client:
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_only_an_account_made_through_an_invitation_link_has_an_unverified_address(
    session_client, admin_browser, monkeypatch, db
):
    sign_up_through_the_link(invite(session_client, "linked@example.com").json()["accept_url"])
    assert not User.objects.get(email="linked@example.com").email_verified
    # The operator's ways: the Django admin's add page, bootstrap_admin (tests/organizations/test_bootstrap.py
    # runs it on an empty gateway; here the account exists and the operator names it) and createsuperuser.
    response = admin_browser.post(
        "/admin/accounts/user/add/",
        {
            "email": "added@example.com",
            "password1": "a long admin passphrase",
            "password2": "a long admin passphrase",
        },
    )
    assert response.status_code == 302, response.content
    assert User.objects.get(email="added@example.com").email_verified
    assert User.objects.create_superuser(email="root@example.com", password="x" * 20).email_verified
    # The account list says which are which (read twice: the first shows the "added" message).
    admin_browser.get("/admin/accounts/user/")
    page = admin_browser.get("/admin/accounts/user/?email_verified__exact=0").content.decode()
    assert "linked@example.com" in page and "added@example.com" not in page


def test_the_first_admin_bootstrap_verifies_the_address_it_names(db):
    from apps.organizations.services import first_admin_bootstrap

    organization, user, _ = first_admin_bootstrap(
        email="ops@example.com", password=None, organization_name="Ops"
    )
    assert user.email_verified and organization.memberships.get().user == user


def test_an_unverified_account_answers_an_invitation_only_through_its_own_link(
    session_client, organization, outsider
):
    """The real newcomer, whose account B's link made, is invited by A: the list and the ids say
    nothing, A's link (which A's owner gave them) accepts, signed in as the address."""
    b_owner = signed_in(outsider.user)
    browser = sign_up_through_the_link(invite(b_owner, "newcomer@example.com").json()["accept_url"])
    a_invitation = invite(session_client, "newcomer@example.com", "admin").json()

    assert b"No invitations waiting" in browser.get("/console/invitations/").content
    assert organization.name not in browser.get("/console/invitations/").content.decode()
    token = browser.cookies["csrftoken"].value
    by_id = browser.post(f"/console/invitations/{a_invitation['id']}/accept", {"csrfmiddlewaretoken": token})
    assert by_id.status_code == 404
    assert not Membership.objects.filter(
        organization=organization, user__email="newcomer@example.com"
    ).exists()

    response = console_post(browser, link_path(a_invitation), {"answer": "accept"})
    assert response.status_code == 302 and response["Location"] == "/console/"
    membership = Membership.objects.get(organization=organization, user__email="newcomer@example.com")
    assert membership.role == "admin"
    assert session_client.get(f"{INVITATIONS}/{a_invitation['id']}").json()["status"] == "accepted"


def test_an_unverified_account_declines_through_the_link(session_client, organization, outsider):
    browser = sign_up_through_the_link(
        invite(signed_in(outsider.user), "newcomer@example.com").json()["accept_url"]
    )
    a_invitation = invite(session_client, "newcomer@example.com").json()
    response = console_post(browser, link_path(a_invitation), {"answer": "decline"})
    assert response.status_code == 302
    assert session_client.get(f"{INVITATIONS}/{a_invitation['id']}").json()["status"] == "declined"
    assert not Membership.objects.filter(
        organization=organization, user__email="newcomer@example.com"
    ).exists()


def test_the_link_answers_for_its_own_address_only(session_client, organization, outsider):
    """Holding the link is not enough: the session must be the invited address's."""
    invitation = invite(session_client, "someone@example.com").json()
    browser = Client()
    browser.force_login(outsider.user)
    page = browser.get(link_path(invitation)).content.decode()
    assert "this invitation is for another address" in page
    response = console_post(browser, link_path(invitation), {"answer": "accept"})
    assert response.status_code == 302 and response["Location"] == "/console/invitations/"
    assert not Membership.objects.filter(organization=organization, user=outsider.user).exists()
    assert session_client.get(f"{INVITATIONS}/{invitation['id']}").json()["status"] == "pending"


def test_a_verified_account_answers_by_id_through_the_console_too(session_client, organization, outsider):
    invitation = invite(session_client, outsider.user.email, "admin").json()
    browser = Client()
    browser.force_login(outsider.user)
    assert organization.name in browser.get("/console/invitations/").content.decode()
    token = browser.cookies["csrftoken"].value
    response = browser.post(f"/console/invitations/{invitation['id']}/accept", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert Membership.objects.get(organization=organization, user=outsider.user).role == "admin"


def test_the_operator_reclaims_a_squatted_address_for_its_owner(
    session_client, organization, outsider, admin_browser
):
    """Without single sign-on, the operator who has checked who owns the address reclaims the account
    in the Django admin, then sets a password for its owner, who then sees A's invitation and accepts
    it by its id (the address is verified now)."""
    b_owner = signed_in(outsider.user)
    squatters_browser = sign_up_through_the_link(
        invite(b_owner, "newhire@a.test").json()["accept_url"], "mallory's passphrase for newhire"
    )
    squatters_api = api_session("newhire@a.test", "mallory's passphrase for newhire")
    a_invitation = invite(session_client, "newhire@a.test", "admin").json()
    account = User.objects.get(email="newhire@a.test")

    response = admin_browser.post(
        "/admin/accounts/user/", {"action": "reclaim", "_selected_action": [str(account.pk)]}
    )
    assert response.status_code == 302
    account.refresh_from_db()
    assert account.email_verified and not account.has_usable_password()
    assert not Membership.objects.filter(user=account).exists()
    assert squatters_api.get(MINE).status_code == 401
    assert squatters_browser.get("/console/invitations/").status_code == 302  # signed out
    response = admin_browser.post(
        f"/admin/accounts/user/{account.pk}/password/",
        {
            "usable_password": "true",
            "password1": "newhire's own passphrase",
            "password2": "newhire's own passphrase",
        },
    )
    assert response.status_code == 302, response.content

    response = APIClient().post(
        "/api/v1/auth/login",
        {"email": "newhire@a.test", "password": "newhire's own passphrase"},
        format="json",
    )
    # No organization yet: the console is the way in, where the verified account lists A's invitation.
    assert response.status_code == 403 and response.json()["error"]["code"] == "no_organization"
    browser = Client()
    response = browser.post(
        "/console/login/", {"login": "newhire@a.test", "password": "newhire's own passphrase"}
    )
    assert response.status_code == 302, response.content
    page = browser.get("/console/invitations/")
    assert organization.name in page.content.decode(), page
    token = browser.cookies["csrftoken"].value
    browser.post(f"/console/invitations/{a_invitation['id']}/accept", {"csrfmiddlewaretoken": token})
    assert Membership.objects.get(organization=organization, user=account).role == "admin"


@pytest.mark.django_db(transaction=True)
def test_accounts_that_exist_when_the_address_rule_arrives_count_as_verified():
    """The migration: every existing account verified (they were made by the operator or single
    sign-on, or cannot be told apart from those), new ones not unless made so."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("accounts", "0001_initial")], [("accounts", "0002_email_verified")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old_user = executor.loader.project_state(before).apps.get_model("accounts", "User")
    existing = old_user.objects.create(email="existing@example.com", password="!")
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)
    assert User.objects.get(pk=existing.pk).email_verified
    assert not User.objects.create_user(email="new@example.com", password=None).email_verified
