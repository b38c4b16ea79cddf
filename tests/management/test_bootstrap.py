import re
from io import StringIO

from django.core.management import call_command

from apps.organizations.models import Membership, Organization


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
