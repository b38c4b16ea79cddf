import pytest
from django.test import Client

from tests.factories import MembershipFactory
from tests.webhooks.conftest import receiver  # noqa: F401 (fixture: the webhooks tests' live HTTPS receiver)


@pytest.fixture
def console_for(db):
    """A browser-like client (cookies and CSRF checked) signed in to the console as a new member of
    ``organization`` with ``role``."""

    def make(organization, role: str) -> Client:
        membership = MembershipFactory(organization=organization, role=role)
        client = Client(enforce_csrf_checks=True)
        client.force_login(membership.user)
        client.membership = membership
        return client

    return make


def csrf_token(client: Client, path: str) -> str:
    """Reads a page the way a browser does and returns the token its forms carry."""
    response = client.get(path)
    assert response.status_code == 200, response.content
    return (
        response.cookies["csrftoken"].value
        if "csrftoken" in response.cookies
        else client.cookies["csrftoken"].value
    )


def post_form(client: Client, form_page: str, action: str, data: dict):
    """Posts ``data`` to ``action`` as the form on ``form_page`` would, CSRF token included."""
    return client.post(action, {**data, "csrfmiddlewaretoken": csrf_token(client, form_page)})
