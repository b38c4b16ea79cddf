"""The organization: its settings (those of ``PATCH /api/v1/organizations/current``: name, audit bodies
and retention, data regions, what limits do while Redis is unreachable, the response cache, and the
organization's own budget and rate limits; the plan is the operator's, set in the Django admin) and
its members.

Everyone reads both pages. Admins and owners change the settings, as the API allows; only owners
invite people (an account joins only by accepting), change a role or remove a member, and the
organization always keeps one owner.
(``/console/organization/`` itself is the organization switch of the top bar.)

An invitation and a change of role are posted to their services as the API's bodies (``data=``), which
check them (apps/organizations/inputs.py); the settings through the API's serializer, as before.
"""

from django.conf import settings
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache

from apps.catalog.selectors import default_price_of, model_aliases_of
from apps.console.access import Console, console_view
from apps.console.forms import (
    decimal_number,
    flag,
    flat_errors,
    labels,
    limits_input,
    service_errors,
    text,
    whole,
)
from apps.core.errors import GatewayError, InvalidRequest
from apps.limits.api.serializers import attached_limits, nested_under
from apps.limits.models import BudgetPeriod, Scope
from apps.limits.usage import usage_of
from apps.organization_settings import services as settings_services
from apps.organization_settings.api.serializers import OrganizationSerializer
from apps.organizations import selectors, services
from apps.organizations.models import FailMode, LogBodies, Membership, Role

FLAGS = ("cache_enabled", "cache_any_temperature", "cache_semantic_enabled")


def _settings_input(post) -> dict:
    """The settings form as the API's PATCH body: ``{"name", "settings": {...}}``."""
    settings = {
        "log_bodies": text(post, "log_bodies"),
        "log_retention_days": whole(post, "log_retention_days"),
        "allowed_data_regions": labels(post, "allowed_data_regions"),
        "limits_fail_mode": text(post, "limits_fail_mode"),
        "cache_ttl_seconds": whole(post, "cache_ttl_seconds"),
        "cache_semantic_threshold": decimal_number(post, "cache_semantic_threshold"),
        "cache_embedding_model": post.get("cache_embedding_model", "").strip(),
        "allowed_models": labels(post, "allowed_models"),
        "default_price": _default_price_input(post),
        **limits_input(post),
    }
    for name in FLAGS:
        value = flag(post, name)
        if value is not None:
            settings[name] = value
    if settings["limits_fail_mode"] is None:  # the form asks only when limits are counted in Redis
        del settings["limits_fail_mode"]
    return {"name": post.get("name", "").strip(), "settings": settings}


def _default_price_input(post) -> dict | None:
    """Both prices empty: no default; otherwise both, for the serializer to check."""
    prices = {name: text(post, f"default_price_{name}") for name in ("input_per_mtok", "output_per_mtok")}
    if all(value is None for value in prices.values()):
        return None
    return {name: value or "" for name, value in prices.items()}


def _settings_page(request, console: Console, *, errors=None, form=None, status=200):
    organization = console.organization
    organization.refresh_from_db()  # a refused write may have changed the instance before it was refused
    limits = attached_limits(organization)
    return render(
        request,
        "console/organization/settings.html",
        {
            "console": console,
            "organization": organization,
            "limits": limits,
            "usage": usage_of(
                organization=organization,
                scope=Scope.ORGANIZATION,
                scope_id=organization.id,
                limits=limits,
                now=timezone.now(),
            ),
            "log_bodies_choices": LogBodies.choices,
            "fail_modes": FailMode.choices,
            # What limits do while Redis is unreachable matters only where they are counted there.
            "uses_redis": bool(settings.REDIS_URL),
            "aliases": model_aliases_of(organization.id).values_list("alias", flat=True),
            "default_price": default_price_of(organization.id, timezone.now()),
            "periods": BudgetPeriod.values,
            "errors": errors or {},
            "form": form,
        },
        status=status,
    )


@console_view()
def organization_settings(request, console: Console):
    return _settings_page(request, console)


@console_view(role=Role.ADMIN, methods=("POST",))
def organization_settings_update(request, console: Console):
    organization = console.organization
    serializer = OrganizationSerializer(organization, data=_settings_input(request.POST), partial=True)
    if not serializer.is_valid():
        return _settings_page(
            request, console, errors=flat_errors(serializer.errors), form=request.POST, status=400
        )
    try:
        try:
            settings_services.organization_settings_update(
                organization=organization, **serializer.validated_data
            )
        except InvalidRequest as error:
            raise nested_under("settings", error) from error
    except GatewayError as error:
        return _settings_page(
            request, console, errors=service_errors(error), form=request.POST, status=error.status
        )
    messages.success(
        request, "Saved the organization's settings; the proxy applies them from the next request."
    )
    return redirect("console:organization-settings")


# --- Members ---------------------------------------------------------------------------------------


def _members_page(request, console: Console, *, errors=None, form=None, status=200):
    return render(
        request,
        "console/organization/members.html",
        {
            "console": console,
            "memberships": selectors.memberships_of(console.organization.id),
            "invitations": selectors.invitations_of(console.organization.id)[:100]
            if console.is_owner
            else (),
            "now": timezone.now(),
            "invitation_ttl_days": settings.GATEWAY_INVITATION_TTL_DAYS,
            "roles": Role.values,
            "errors": errors or {},
            "form": form,
        },
        status=status,
    )


def _membership(console: Console, membership_id) -> Membership:
    return get_object_or_404(selectors.memberships_of(console.organization.id), pk=membership_id)


@console_view()
def organization_members(request, console: Console):
    return _members_page(request, console)


@never_cache  # the page carries the only copy of the accept link
@console_view(role=Role.OWNER, methods=("POST",))
def member_invite(request, console: Console):
    """Invites an address (the same answer whether or not it has an account); the accept link is
    shown once, on the page this answers."""
    try:
        invitation, token = services.invitation_create(
            organization=console.organization,
            data={"email": request.POST.get("email", ""), "role": request.POST.get("role", Role.MEMBER)},
            invited_by=console.user,
        )
    except GatewayError as error:
        form = {name: request.POST.get(name, "") for name in ("email", "role")}
        return _members_page(request, console, errors=service_errors(error), form=form, status=error.status)
    return render(
        request,
        "console/organization/invited.html",
        {
            "console": console,
            "invitation": invitation,
            "link": request.build_absolute_uri(reverse("console:invitation-link", kwargs={"token": token})),
        },
        status=201,
    )


@console_view(role=Role.OWNER, methods=("POST",))
def invitation_revoke(request, console: Console, invitation_id):
    invitation = get_object_or_404(selectors.invitations_of(console.organization.id), pk=invitation_id)
    try:
        services.invitation_revoke(invitation=invitation)
    except GatewayError as error:
        return _members_page(request, console, errors=service_errors(error), status=error.status)
    messages.success(request, f"Revoked the invitation of {invitation.email}.")
    return redirect("console:organization-members")


@console_view(role=Role.OWNER, methods=("POST",))
def member_change_role(request, console: Console, membership_id):
    membership = _membership(console, membership_id)
    try:
        services.membership_change_role(membership=membership, data={"role": request.POST.get("role", "")})
    except GatewayError as error:
        return _members_page(request, console, errors=service_errors(error), status=error.status)
    messages.success(request, f"{membership.user.email} is now {membership.role}.")
    return redirect("console:organization-members")


@console_view(role=Role.OWNER, methods=("POST",))
def member_remove(request, console: Console, membership_id):
    membership = _membership(console, membership_id)
    try:
        services.membership_remove(membership=membership)
    except GatewayError as error:
        return _members_page(request, console, errors=service_errors(error), status=error.status)
    messages.success(request, f"Removed {membership.user.email} from {console.organization.name}.")
    if membership.user_id == console.user.id:
        return redirect("console:home")  # the console of another of their organizations, or the refusal
    return redirect("console:organization-members")


urlpatterns = [
    path("organization/settings/", organization_settings, name="organization-settings"),
    path("organization/settings/edit", organization_settings_update, name="organization-settings-update"),
    path("organization/members/", organization_members, name="organization-members"),
    path("organization/members/invite", member_invite, name="organization-member-invite"),
    path(
        "organization/invitations/<uuid:invitation_id>/revoke",
        invitation_revoke,
        name="organization-invitation-revoke",
    ),
    path(
        "organization/members/<uuid:membership_id>/role", member_change_role, name="organization-member-role"
    ),
    path(
        "organization/members/<uuid:membership_id>/remove", member_remove, name="organization-member-remove"
    ),
]
