"""SSO connections: list, add, edit, delete the organization's OpenID Connect and SAML 2.0 connections
(docs/sso.md).

Owners only, for every page, reading included (admins and members get 403, on the server), as in the
API. Forms are written through the API's services, which check them (apps/sso/inputs.py), so the plan rule
(403 plan_required on the free plan) and the domain claims (409 sso_domain_taken) hold here too and
are shown on the form. The client secret is write-only: never put back in a page, not even in a
form shown again after an error; only its last four characters are shown.
"""

from allauth.utils import build_absolute_uri
from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse

from apps.console.access import Console, console_view
from apps.console.forms import flag, labels, service_errors, text
from apps.core.errors import GatewayError
from apps.organizations.models import Plan, Role
from apps.sso import dns, selectors, services
from apps.sso.models import MemberRole, Protocol, SsoConnection
from apps.sso.saml import sp_urls
from apps.sso.validation import certificate_summary

SECRET = "client_secret"  # never echoed


def _input(post: QueryDict, *, protocol: str | None) -> dict:
    """The posted fields, those of ``protocol`` only (a new connection: the one chosen on the form)."""
    creating = protocol is None
    if creating:
        protocol = post.get("protocol") or Protocol.OIDC
    data = {
        "name": post.get("name", "").strip(),
        "protocol": protocol if creating else None,
        "allowed_domains": labels(post, "allowed_domains"),
        "default_role": text(post, "default_role"),
        "is_active": flag(post, "is_active"),
        "require_sso": flag(post, "require_sso"),
    }
    if protocol == Protocol.SAML:
        data["idp_entity_id"] = post.get("idp_entity_id", "").strip()
        data["idp_sso_url"] = post.get("idp_sso_url", "").strip()
        data["idp_certificate"] = post.get("idp_certificate", "").strip()
        return {name: value for name, value in data.items() if value is not None}
    data["issuer"] = post.get("issuer", "").strip()
    data["client_id"] = post.get("client_id", "").strip()
    secret = post.get(SECRET, "")
    if secret or creating:
        data[SECRET] = secret
    return {name: value for name, value in data.items() if value is not None}


def _without_secret(post: QueryDict) -> dict:
    return {name: post.get(name) for name in post if name not in (SECRET, "csrfmiddlewaretoken")} | {
        "allowed_domains": post.get("allowed_domains", "")
    }


def callback_url(request, connection: SsoConnection) -> str:
    """What to register at the identity provider: the redirect URI (OpenID Connect) or the ACS URL
    (SAML 2.0)."""
    if connection.protocol == Protocol.SAML:
        return sp_urls(request, connection.id)["acs_url"]
    return build_absolute_uri(request, reverse("sso_callback", kwargs={"provider_id": connection.id}))


def _context(console: Console, **extra) -> dict:
    return {
        "console": console,
        "roles": MemberRole.choices,
        "protocols": Protocol.choices,
        "plan_allows": console.organization.plan != Plan.FREE,
        "plan_message": services.PLAN_MESSAGE,
        **extra,
    }


def _connection(console: Console, connection_id) -> SsoConnection:
    return get_object_or_404(
        selectors.sso_connections(organization_id=console.organization.id), pk=connection_id
    )


def _list_page(request, console: Console, *, errors=None, status=200):
    connections = [
        (connection, callback_url(request, connection))
        for connection in selectors.sso_connections(organization_id=console.organization.id)
    ]
    domains = list(selectors.sso_domains(organization_id=console.organization.id))
    for sso_domain in domains:
        sso_domain.txt_name = dns.challenge_name(sso_domain.domain)
        sso_domain.txt_value = dns.challenge_value(sso_domain.token)
    return render(
        request,
        "console/sso/list.html",
        _context(console, rows=connections, domains=domains, errors=errors or {}),
        status=status,
    )


@console_view(role=Role.OWNER)
def sso_connection_list(request, console: Console):
    return _list_page(request, console)


@console_view(role=Role.OWNER, methods=("POST",))
def sso_domain_verify(request, console: Console, domain_id):
    """Looks for the domain's TXT record now (the API's ``POST /api/v1/sso/domains/{id}/verify``)."""
    sso_domain = get_object_or_404(
        selectors.sso_domains(organization_id=console.organization.id), pk=domain_id
    )
    try:
        services.sso_domain_verify_dns(sso_domain=sso_domain)
    except GatewayError as error:
        return _list_page(request, console, errors={sso_domain.domain: [error.message]}, status=error.status)
    messages.success(
        request, f"{sso_domain.domain} is proved: it signs in through {console.organization.name}."
    )
    return redirect("console:sso-connections")


@console_view(role=Role.OWNER, methods=("GET", "POST"))
def sso_connection_create(request, console: Console):
    errors: dict = {}
    status = 200
    if request.method == "POST":
        try:
            connection = services.sso_connection_create(
                organization=console.organization, data=_input(request.POST, protocol=None)
            )
        except GatewayError as error:
            errors, status = service_errors(error), error.status
        else:
            what = "ACS URL" if connection.protocol == Protocol.SAML else "redirect URI"
            messages.success(
                request,
                f"Added {connection.name}. Register {callback_url(request, connection)} as its {what} "
                "at the identity provider.",
            )
            return redirect("console:sso-connection", connection_id=connection.id)
    return render(
        request,
        "console/sso/form.html",
        _context(console, errors=errors, form=_without_secret(request.POST) if errors else None),
        status=status,
    )


def _detail(request, console: Console, connection: SsoConnection, *, errors=None, form=None, status=200):
    return render(
        request,
        "console/sso/detail.html",
        _context(
            console,
            connection=connection,
            callback_url=callback_url(request, connection),
            saml=sp_urls(request, connection.id) if connection.protocol == Protocol.SAML else None,
            certificate=certificate_summary(connection.idp_certificate)
            if connection.protocol == Protocol.SAML
            else None,
            errors=errors or {},
            form=form,
        ),
        status=status,
    )


@console_view(role=Role.OWNER)
def sso_connection_detail(request, console: Console, connection_id):
    return _detail(request, console, _connection(console, connection_id))


@console_view(role=Role.OWNER, methods=("POST",))
def sso_connection_update(request, console: Console, connection_id):
    connection = _connection(console, connection_id)
    try:
        services.sso_connection_update(
            connection=connection, data=_input(request.POST, protocol=connection.protocol)
        )
    except GatewayError as error:
        errors, status = service_errors(error), error.status
    else:
        messages.success(request, f"Saved {connection.name}.")
        return redirect("console:sso-connection", connection_id=connection.id)
    connection.refresh_from_db()
    return _detail(
        request, console, connection, errors=errors, form=_without_secret(request.POST), status=status
    )


@console_view(role=Role.OWNER, methods=("POST",))
def sso_connection_delete(request, console: Console, connection_id):
    connection = _connection(console, connection_id)
    services.sso_connection_delete(connection=connection)
    messages.success(request, f"Deleted {connection.name}; its email domains sign in with passwords again.")
    return redirect("console:sso-connections")


urlpatterns = [
    path("sso/", sso_connection_list, name="sso-connections"),
    path("sso/new", sso_connection_create, name="sso-connection-create"),
    path("sso/domains/<uuid:domain_id>/verify", sso_domain_verify, name="sso-domain-verify"),
    path("sso/<uuid:connection_id>/", sso_connection_detail, name="sso-connection"),
    path("sso/<uuid:connection_id>/edit", sso_connection_update, name="sso-connection-update"),
    path("sso/<uuid:connection_id>/delete", sso_connection_delete, name="sso-connection-delete"),
]
