import re
from io import StringIO

import pytest
from django.contrib.auth.password_validation import validate_password
from django.core.management import CommandError, call_command

from apps.accounts.models import User
from apps.organizations.models import Membership, Organization
from tests.factories import MembershipFactory


def run_bootstrap(monkeypatch, **env: str) -> str:
    for name in ("GATEWAY_ADMIN_EMAIL", "GATEWAY_ADMIN_PASSWORD", "GATEWAY_ORG_NAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = StringIO()
    call_command("bootstrap_admin", stdout=out)
    return out.getvalue()


def test_the_first_run_creates_an_owner_with_a_generated_password_shown_once(db, monkeypatch, api_client):
    output = run_bootstrap(monkeypatch, GATEWAY_ADMIN_EMAIL="ops@example.com", GATEWAY_ORG_NAME="Acme")
    password = re.search(r"Generated password for ops@example.com: (\S+)", output).group(1)
    membership = Membership.objects.get(user__email="ops@example.com")
    assert membership.role == "owner"
    assert membership.organization.name == "Acme"
    assert membership.user.is_superuser  # may use the Django admin console
    validate_password(password, user=membership.user)  # a generated password passes the validators too
    response = api_client.post(
        "/api/v1/auth/login", {"email": "ops@example.com", "password": password}, format="json"
    )
    assert response.status_code == 200

    second = run_bootstrap(monkeypatch, GATEWAY_ADMIN_EMAIL="ops@example.com")
    assert "nothing to do" in second
    assert password not in second
    assert Organization.objects.count() == 1


def test_a_given_password_is_used_and_never_printed(db, monkeypatch, api_client):
    output = run_bootstrap(
        monkeypatch, GATEWAY_ADMIN_EMAIL="ops@example.com", GATEWAY_ADMIN_PASSWORD="chosen-by-the-operator"
    )
    assert "chosen-by-the-operator" not in output
    assert "Generated password" not in output
    response = api_client.post(
        "/api/v1/auth/login",
        {"email": "ops@example.com", "password": "chosen-by-the-operator"},
        format="json",
    )
    assert response.status_code == 200


@pytest.mark.parametrize("weak", ["tiny1", "password123", "12345678901234", "ops@example.com"])
def test_it_refuses_a_password_the_validators_refuse_and_creates_nothing(db, monkeypatch, weak):
    with pytest.raises(CommandError) as raised:
        run_bootstrap(monkeypatch, GATEWAY_ADMIN_EMAIL="ops@example.com", GATEWAY_ADMIN_PASSWORD=weak)

    message = str(raised.value)
    assert "GATEWAY_ADMIN_PASSWORD" in message
    assert weak not in message  # says why, never echoes the password
    assert not Organization.objects.exists()
    assert not User.objects.filter(email="ops@example.com").exists()


def test_a_weak_password_in_the_environment_does_not_stop_a_gateway_already_set_up(db, monkeypatch):
    """make run bootstraps on every start; once an organization exists the password is not used."""
    MembershipFactory()

    output = run_bootstrap(monkeypatch, GATEWAY_ADMIN_EMAIL="ops@example.com", GATEWAY_ADMIN_PASSWORD="tiny1")

    assert "nothing to do" in output


def test_it_refuses_an_organization_name_the_organizations_input_refuses_and_creates_nothing(db, monkeypatch):
    with pytest.raises(CommandError) as raised:
        run_bootstrap(monkeypatch, GATEWAY_ADMIN_EMAIL="ops@example.com", GATEWAY_ORG_NAME="x" * 201)

    assert "GATEWAY_ORG_NAME is refused" in str(raised.value) and "200 characters" in str(raised.value)
    assert not Organization.objects.exists()
    assert not User.objects.filter(email="ops@example.com").exists()
