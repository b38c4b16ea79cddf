"""The console's organization pages: settings (as PATCH /api/v1/organizations/current allows, the plan
read only) and members (owners add, change roles and remove; the last owner stays); roles, tenancy,
CSRF and refused input."""

from decimal import Decimal

import pytest
from django.test import Client

from apps.accounts.models import User
from apps.limits.models import Limits
from apps.organizations.models import Invitation, Membership
from apps.teams.models import TeamMembership
from tests.console.conftest import post_form
from tests.factories import MembershipFactory, ModelAliasFactory, TeamFactory, UserFactory
from tests.management.generations import bumps_generation

pytestmark = pytest.mark.django_db

SETTINGS = "/console/organization/settings/"
MEMBERS = "/console/organization/members/"


def settings_form(organization, **changes) -> dict:
    """The settings form as a browser posts it, filled with the organization's values."""
    form = {
        "name": organization.name,
        "log_bodies": organization.log_bodies,
        "log_retention_days": str(organization.log_retention_days),
        "allowed_data_regions": " ".join(organization.allowed_data_regions),
        "limits_fail_mode": organization.limits_fail_mode,
        "cache_enabled": ["false", "true"] if organization.cache_enabled else ["false"],
        "cache_any_temperature": ["false"],
        "cache_semantic_enabled": ["false"],
        "cache_ttl_seconds": str(organization.cache_ttl_seconds),
        "cache_semantic_threshold": "0.95",
        "cache_embedding_model": "",
        "budget_amount_usd": "",
        "budget_period": "monthly",
        "budget_thresholds": "",
        "rpm": "",
        "tpm": "",
    }
    form.update(changes)
    return form


# --- Settings --------------------------------------------------------------------------------------


def test_a_member_reads_the_settings_but_not_the_plan_and_gets_no_form(console_for, organization, outsider):
    client = console_for(organization, "member")
    page = client.get(SETTINGS).content.decode()
    assert organization.name in page and "Spend this monthly period" in page
    assert "growth" not in page  # the plan is the operator's business (the Django admin's)
    assert outsider.organization.name not in page
    assert 'name="log_bodies"' not in page


def test_an_admin_changes_the_settings_and_the_organizations_limits(
    console_for, organization, django_capture_on_commit_callbacks
):
    ModelAliasFactory(organization=organization, alias="embedder")
    client = console_for(organization, "admin")
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(
            client,
            SETTINGS,
            f"{SETTINGS}edit",
            settings_form(
                organization,
                name="Renamed Inc",
                log_bodies="metadata",
                log_retention_days="90",
                allowed_data_regions="eu, us",
                limits_fail_mode="closed",
                cache_enabled=["false"],
                cache_any_temperature=["false", "true"],
                cache_semantic_enabled=["false", "true"],
                cache_ttl_seconds="600",
                cache_semantic_threshold="0.9",
                cache_embedding_model="embedder",
                budget_amount_usd="1000",
                rpm="600",
                # The plan is not a setting: a posted one is ignored, as the API ignores it.
                plan="enterprise",
            ),
        )
    assert response.status_code == 302
    organization.refresh_from_db()
    assert (
        organization.name,
        organization.log_bodies,
        organization.log_retention_days,
        organization.allowed_data_regions,
        organization.limits_fail_mode,
        organization.cache_enabled,
        organization.cache_any_temperature,
        organization.cache_semantic_enabled,
        organization.cache_ttl_seconds,
        organization.cache_semantic_threshold,
        organization.cache_embedding_model,
        organization.plan,
    ) == (
        "Renamed Inc",
        "metadata",
        90,
        ["eu", "us"],
        "closed",
        False,
        True,
        True,
        600,
        Decimal("0.9"),
        "embedder",
        "growth",
    )
    limits = Limits.objects.get(organization=organization, team=None, api_key=None)
    assert (limits.budget_usd, limits.rpm) == (1000, 600)
    assert "$1,000.00 monthly" in client.get(SETTINGS).content.decode()


def test_refused_settings_say_why_and_change_nothing(console_for, organization):
    client = console_for(organization, "owner")
    response = post_form(
        client,
        SETTINGS,
        f"{SETTINGS}edit",
        settings_form(
            organization,
            name="",
            log_bodies="everything",
            log_retention_days="0",
            allowed_data_regions="EU!",
            cache_ttl_seconds="soon",
            cache_semantic_threshold="2",
            budget_amount_usd="ten",
        ),
    )
    assert response.status_code == 400
    page = response.content.decode()
    for field in (
        "name",
        "settings.log_bodies",
        "settings.log_retention_days",
        "settings.allowed_data_regions",
        "settings.cache_ttl_seconds",
        "settings.cache_semantic_threshold",
        "settings.budget.amount_usd",
    ):
        assert f"<code>{field}" in page, field
    # The service's rules, once the types are right: the embeddings model is an alias of the catalog,
    # the semantic tier needs one; a budget the service refuses keeps the rest unchanged.
    response = post_form(
        client,
        SETTINGS,
        f"{SETTINGS}edit",
        settings_form(organization, cache_embedding_model="no-such-alias"),
    )
    assert response.status_code == 400
    assert "<code>settings.cache_embedding_model" in response.content.decode()
    assert "No such model alias" in response.content.decode()
    response = post_form(
        client,
        SETTINGS,
        f"{SETTINGS}edit",
        settings_form(organization, cache_semantic_enabled=["false", "true"]),
    )
    assert response.status_code == 400 and "needs an embeddings model alias" in response.content.decode()
    response = post_form(
        client,
        SETTINGS,
        f"{SETTINGS}edit",
        settings_form(organization, name="Changed", budget_amount_usd="5", budget_thresholds="50, 50"),
    )
    assert response.status_code == 400
    assert "settings.budget.thresholds" in response.content.decode()
    before = organization.name
    organization.refresh_from_db()
    assert organization.name == before and organization.log_retention_days == 30
    assert not Limits.objects.filter(organization=organization).exists()


# --- Members ---------------------------------------------------------------------------------------


def test_everyone_reads_the_members_with_their_roles_but_only_owners_get_the_forms(
    console_for, organization, outsider
):
    client = console_for(organization, "member")
    page = client.get(MEMBERS).content.decode()
    assert (
        client.membership.user.email in page and organization.memberships.get(role="owner").user.email in page
    )
    assert outsider.user.email not in page
    assert "Invite someone" not in page and 'name="role"' not in page
    owner = organization.memberships.get(role="owner")
    owner_client = console_for(organization, "owner")
    page = owner_client.get(MEMBERS).content.decode()
    assert "Invite someone" in page and f"/console/organization/members/{owner.id}/role" in page


def test_an_owner_invites_and_nobody_joins_until_the_person_accepts(console_for, organization, outsider):
    """The same page whether or not the address has an account; nothing is made before an answer."""
    owner = console_for(organization, "owner")
    someone = outsider.user  # an account of another organization
    pages = []
    for email in (" New.Person@Example.com ", someone.email.upper()):
        response = post_form(owner, MEMBERS, f"{MEMBERS}invite", {"email": email, "role": "admin"})
        assert response.status_code == 201
        pages.append(response.content.decode())
    assert all("/console/invitations/" in page and "shown once" in page for page in pages)
    assert not User.objects.filter(email="new.person@example.com").exists()
    assert not Membership.objects.filter(organization=organization, user=someone).exists()
    listed = owner.get(MEMBERS).content.decode()
    assert "new.person@example.com" in listed and someone.email in listed and "pending" in listed
    assert Invitation.objects.filter(organization=organization, status="pending").count() == 2


def test_a_refused_invitation_says_why_and_invites_nobody(console_for, organization):
    owner = console_for(organization, "owner")
    existing = MembershipFactory(organization=organization, role="member").user
    cases = [
        ({"email": "not-an-email", "role": "member"}, 400, "valid email address"),
        # The API's message for a role it does not know (apps/organizations/inputs.py).
        ({"email": "x@example.com", "role": "superuser"}, 400, "superuser&quot; is not a valid choice."),
        ({"email": existing.email, "role": "member"}, 409, "is a member of this organization already"),
    ]
    for data, status, message in cases:
        response = post_form(owner, MEMBERS, f"{MEMBERS}invite", data)
        assert response.status_code == status, data
        assert message in response.content.decode(), data
    assert not Invitation.objects.exists()
    assert organization.memberships.count() == 3


def test_an_owner_revokes_a_pending_invitation(console_for, organization):
    owner = console_for(organization, "owner")
    post_form(owner, MEMBERS, f"{MEMBERS}invite", {"email": "later@example.com", "role": "member"})
    invitation = Invitation.objects.get(email="later@example.com")
    response = post_form(owner, MEMBERS, f"/console/organization/invitations/{invitation.id}/revoke", {})
    assert response.status_code == 302
    invitation.refresh_from_db()
    assert invitation.status == "revoked"
    # Revoked: the address can be invited again.
    response = post_form(owner, MEMBERS, f"{MEMBERS}invite", {"email": "later@example.com", "role": "member"})
    assert response.status_code == 201


def test_an_owner_changes_roles_but_the_last_owner_stays_an_owner(console_for, organization):
    owner_client = console_for(organization, "owner")
    first_owner = organization.memberships.exclude(pk=owner_client.membership.pk).get(role="owner")
    member = MembershipFactory(organization=organization, role="member")
    response = post_form(owner_client, MEMBERS, f"{MEMBERS}{member.id}/role", {"role": "admin"})
    assert response.status_code == 302
    member.refresh_from_db()
    assert member.role == "admin"

    # Two owners: one may step down; then the other is the last and may not.
    response = post_form(owner_client, MEMBERS, f"{MEMBERS}{first_owner.id}/role", {"role": "member"})
    assert response.status_code == 302
    me = owner_client.membership
    response = post_form(owner_client, MEMBERS, f"{MEMBERS}{me.id}/role", {"role": "admin"})
    assert response.status_code == 409
    assert "keeps at least one owner" in response.content.decode()
    me.refresh_from_db()
    assert me.role == "owner"
    response = post_form(owner_client, MEMBERS, f"{MEMBERS}{member.id}/role", {"role": "root"})
    assert response.status_code == 400
    member.refresh_from_db()
    assert member.role == "admin"


def test_an_owner_removes_a_member_from_the_organization_and_its_teams(console_for, organization):
    owner_client = console_for(organization, "owner")
    member = MembershipFactory(organization=organization, role="member")
    team = TeamFactory(organization=organization)
    TeamMembership.objects.create(team=team, user=member.user)
    response = post_form(owner_client, MEMBERS, f"{MEMBERS}{member.id}/remove", {})
    assert response.status_code == 302
    assert not Membership.objects.filter(pk=member.pk).exists()
    assert not TeamMembership.objects.filter(user=member.user).exists()
    assert User.objects.filter(pk=member.user.pk).exists()  # the account stays


def test_the_last_owner_cannot_be_removed(console_for, organization):
    organization.memberships.filter(role="owner").update(role="admin")
    owner_client = console_for(organization, "owner")
    response = post_form(owner_client, MEMBERS, f"{MEMBERS}{owner_client.membership.id}/remove", {})
    assert response.status_code == 409
    assert Membership.objects.filter(pk=owner_client.membership.pk, role="owner").exists()


def test_an_owner_who_removes_themselves_loses_access_at_once(console_for, organization):
    owner_client = console_for(organization, "owner")  # the fixture's owner stays
    response = post_form(owner_client, MEMBERS, f"{MEMBERS}{owner_client.membership.id}/remove", {})
    assert response.status_code == 302
    assert owner_client.get(MEMBERS).status_code == 403


@pytest.mark.parametrize("role", ["member", "admin"])
@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("invite", {"email": "sneaky@example.com", "role": "owner"}),
        ("{id}/role", {"role": "owner"}),
        ("{id}/remove", {}),
    ],
)
def test_only_owners_manage_members_on_the_server(console_for, organization, role, path, data):
    client = console_for(organization, role)
    target = MembershipFactory(organization=organization, role="member")
    response = post_form(client, MEMBERS, MEMBERS + path.format(id=target.id), data)
    assert response.status_code == 403
    target.refresh_from_db()
    assert target.role == "member"
    assert not Invitation.objects.exists()
    client.membership.refresh_from_db()
    assert client.membership.role == role


def test_a_member_cannot_change_the_settings(console_for, organization):
    client = console_for(organization, "member")
    response = post_form(client, SETTINGS, f"{SETTINGS}edit", settings_form(organization, name="Taken over"))
    assert response.status_code == 403
    organization.refresh_from_db()
    assert organization.name != "Taken over"


@pytest.mark.parametrize("suffix", ["role", "remove"])
def test_another_organizations_membership_answers_404(console_for, organization, outsider, suffix):
    client = console_for(organization, "owner")
    response = post_form(client, MEMBERS, f"{MEMBERS}{outsider.id}/{suffix}", {"role": "member"})
    assert response.status_code == 404
    outsider.refresh_from_db()
    assert outsider.role == "owner"


def test_posts_without_the_csrf_token_are_refused(console_for, organization):
    client = console_for(organization, "owner")
    member = MembershipFactory(organization=organization, role="member")
    assert client.post(f"{MEMBERS}{member.id}/remove", {}).status_code == 403
    assert client.post(f"{SETTINGS}edit", settings_form(organization, name="X")).status_code == 403
    assert Membership.objects.filter(pk=member.pk).exists()
    organization.refresh_from_db()
    assert organization.name != "X"


def test_the_invited_person_sees_and_accepts_in_the_console_even_without_an_organization(
    console_for, organization
):
    owner = console_for(organization, "owner")
    newcomer = UserFactory(email="solo@example.com")  # an account of no organization yet
    post_form(owner, MEMBERS, f"{MEMBERS}invite", {"email": newcomer.email, "role": "admin"})
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(newcomer)
    assert browser.get(MEMBERS).status_code == 403  # no organization yet: the refusal links here
    page = browser.get("/console/invitations/").content.decode()
    assert organization.name in page and "Accept" in page
    invitation = Invitation.objects.get(email=newcomer.email)
    response = post_form(browser, "/console/invitations/", f"/console/invitations/{invitation.id}/accept", {})
    assert response.status_code == 302
    assert Membership.objects.get(organization=organization, user=newcomer).role == "admin"
    assert browser.get(MEMBERS).status_code == 200
    # Someone else cannot answer it, even knowing its id.
    other = console_for(organization, "member")
    second = Invitation.objects.create(
        organization=organization,
        email="third@example.com",
        role="member",
        token_digest="x" * 64,
        expires_at=invitation.expires_at,
    )
    response = post_form(other, "/console/invitations/", f"/console/invitations/{second.id}/accept", {})
    assert response.status_code == 404
