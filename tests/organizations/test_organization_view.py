"""``organization_view``: the one way a plain Django view (an export, a console page) is scoped to
the session's organization and role, refusing in the management error shape."""

import pytest
from django.http import JsonResponse
from django.test import Client
from django.urls import path
from rest_framework.test import APIClient

from apps.organizations.models import Role
from apps.organizations.tenancy import organization_view
from gateway_project.urls import urlpatterns as gateway_urlpatterns
from tests.conftest import login
from tests.factories import MembershipFactory
from tests.management.errors import assert_error

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]


@organization_view(role=Role.ADMIN)
def admins_page(request, session):
    return JsonResponse({"organization": str(session.organization.id), "role": session.membership.role})


@organization_view(role=Role.ADMIN, methods=("GET", "POST"))
async def admins_async_page(request, session):
    return JsonResponse({"organization": str(session.organization.id), "role": session.membership.role})


# This module is the URLconf of its tests: the gateway's, with two pages of an admin-only console.
urlpatterns = [
    path("console/sync", admins_page),
    path("console/async", admins_async_page),
    *gateway_urlpatterns,
]


def signed_in(organization, role: str) -> dict[str, str]:
    membership = MembershipFactory(organization=organization, role=role)
    return {"Authorization": f"Bearer {login(APIClient(), membership.user.email)['access']}"}


def call(page: str, method: str = "get", headers: dict | None = None):
    # Django's client runs the async view on its own loop; CSRF is enforced, as a browser's would be.
    return getattr(Client(enforce_csrf_checks=True), method)(f"/console/{page}", headers=headers or {})


@pytest.fixture(params=["sync", "async"])
def view(request) -> str:
    return request.param


def test_it_refuses_a_request_without_a_session_with_a_401(view):
    response = call(view)

    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == 'Bearer realm="management"'


def test_it_refuses_a_role_below_the_one_required_with_a_403(view, organization):
    response = call(view, headers=signed_in(organization, "member"))

    assert_error(response, 403, "permission_denied")


@pytest.mark.parametrize("role", ["admin", "owner"])
def test_it_lets_a_sufficient_role_in_scoped_to_its_own_organization(view, organization, outsider, role):
    response = call(view, headers=signed_in(organization, role))
    theirs = call(view, headers=signed_in(outsider.organization, role))

    assert response.status_code == 200
    assert response.json() == {"organization": str(organization.id), "role": role}
    assert theirs.json()["organization"] == str(outsider.organization.id)


def test_it_refuses_another_method_with_a_json_405_naming_the_allowed_ones(view, organization):
    response = call(view, "delete", headers=signed_in(organization, "owner"))

    assert_error(response, 405, "method_not_allowed")
    assert response["Allow"] == ("GET" if view == "sync" else "GET, POST")


def test_it_refuses_an_api_key_as_the_management_api_does(view, api_key):
    response = call(view, headers={"Authorization": f"Bearer {api_key[1]}"})

    assert_error(response, 401, "api_key_not_accepted")
