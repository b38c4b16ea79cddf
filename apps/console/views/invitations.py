"""The invited person's side of an invitation (docs/console.md, "Invitations").

- ``/console/invitations/``: the invitations to the signed-in account's address, with Accept and
  Decline. It needs a signed-in account but no membership: an account that belongs to no organization
  yet is where most invitations go.
- ``/console/invitations/<token>/``: the accept link an owner passes on. Signed in as the invited
  address, it offers Accept and Decline (posted back to the link: holding it is what lets an account
  whose address is not verified answer); signed out, it offers to sign in, or, for an address without
  an account, to choose a password, which makes the account (unverified) and accepts.

An account made through an invitation link has proved only that it held the link, which its inviter
saw too: its list is empty, and it answers each invitation through that invitation's own link
(docs/security.md, "Squatting an address through an invitation link").

Accepting, declining and signing up go through apps/organizations/services.py, as the API does.
"""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from apps.console.access import choose_organization, console_of
from apps.console.forms import service_errors
from apps.core.errors import GatewayError
from apps.organizations import selectors, services
from apps.organizations.models import InvitationStatus

BACKEND = settings.AUTHENTICATION_BACKENDS[0]


def _page(request, template: str, context: dict, status: int = 200):
    # The top bar of a person who belongs to an organization already; none otherwise.
    console = console_of(request) if request.user.is_authenticated else None
    request.console = console
    return render(request, template, {"console": console, **context}, status=status)


@never_cache
def invitation_list(request):
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path(), settings.CONSOLE_LOGIN_URL)
    return _page(
        request, "console/invitations/list.html", {"invitations": selectors.invitations_for(request.user)}
    )


def _answer(request, invitation, *, accept: bool, token: str | None = None):
    try:
        if accept:
            membership = services.invitation_accept(invitation=invitation, user=request.user, token=token)
        else:
            services.invitation_decline(invitation=invitation, user=request.user, token=token)
    except GatewayError as error:
        messages.error(request, error.message)
        return redirect("console:invitations")
    if not accept:
        messages.success(request, f"Declined the invitation to {invitation.organization.name}.")
        return redirect("console:invitations")
    messages.success(request, f"You joined {membership.organization.name} as {membership.role}.")
    choose_organization(request, str(membership.organization_id))
    return redirect("console:home")


def _answer_by_id(request, invitation_id, *, accept: bool):
    if not request.user.is_authenticated:
        return redirect_to_login("/console/invitations/", settings.CONSOLE_LOGIN_URL)
    invitation = get_object_or_404(selectors.invitations_for(request.user), pk=invitation_id)
    return _answer(request, invitation, accept=accept)


@require_POST
def invitation_accept(request, invitation_id):
    return _answer_by_id(request, invitation_id, accept=True)


@require_POST
def invitation_decline(request, invitation_id):
    return _answer_by_id(request, invitation_id, accept=False)


@never_cache
@require_http_methods(["GET", "POST"])
def invitation_link(request, token: str):
    invitation = selectors.invitation_by_token(token)
    if invitation is None:
        return _page(request, "console/invitations/link.html", {"invitation": None}, status=404)
    status = invitation.current_status(timezone.now())
    context = {"invitation": invitation, "status": status, "errors": {}}
    if status != InvitationStatus.PENDING:
        return _page(request, "console/invitations/link.html", context, status=410)
    if request.user.is_authenticated:
        context["is_invitee"] = request.user.email.lower() == invitation.email
        if request.method == "POST" and request.POST.get("answer") in ("accept", "decline"):
            return _answer(request, invitation, accept=request.POST["answer"] == "accept", token=token)
        return _page(request, "console/invitations/link.html", context)
    if request.method == "POST":
        try:
            membership = services.invitation_sign_up(
                invitation=invitation, data={"password": request.POST.get("password", "")}
            )
        except GatewayError as error:
            context["errors"] = service_errors(error)
            return _page(request, "console/invitations/link.html", context, status=error.status)
        login(request, membership.user, backend=BACKEND)
        messages.success(request, f"Welcome: you joined {membership.organization.name} as {membership.role}.")
        return redirect("console:home")
    return _page(request, "console/invitations/link.html", context)


urlpatterns = [
    path("invitations/", invitation_list, name="invitations"),
    path("invitations/<uuid:invitation_id>/accept", invitation_accept, name="invitation-accept"),
    path("invitations/<uuid:invitation_id>/decline", invitation_decline, name="invitation-decline"),
    path("invitations/<str:token>/", invitation_link, name="invitation-link"),
]
