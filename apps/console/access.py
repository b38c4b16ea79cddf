"""Who may see a console page, in one place.

Every console view is wrapped by ``console_view``: it needs a signed-in user (else the sign-in page),
picks the organization the user works in (kept in the session, checked against their memberships on
every request), and refuses server-side, with a 403 page, a role below the one the view needs. The view
receives a ``Console`` and reads only ``console.organization``'s data, through the domain selectors, so
another organization's object id answers 404 exactly like an id that does not exist.
"""

import functools
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import render

from apps.accounts.models import User
from apps.accounts.sessions import SESSION_ORGANIZATION, SESSION_PINNED_ORGANIZATION
from apps.organizations.models import Membership, Organization, Role
from apps.sso.policy import password_refusals


@dataclass(frozen=True)
class Console:
    user: User
    organization: Organization
    membership: Membership
    memberships: tuple[Membership, ...]

    @property
    def role(self) -> str:
        return self.membership.role

    def can(self, role: Role) -> bool:
        return self.membership.has_role(role)

    @property
    def can_change(self) -> bool:
        return self.can(Role.ADMIN)

    @property
    def is_owner(self) -> bool:
        return self.can(Role.OWNER)


def console_of(request: HttpRequest) -> Console | None:
    """The signed-in user's console in the organization their session chose (their first one when it
    chose none, or chose one they no longer belong to); None without any membership."""
    memberships = Membership.objects.select_related("organization").filter(user=request.user)
    pinned = request.session.get(SESSION_PINNED_ORGANIZATION)
    if pinned:
        memberships = memberships.filter(organization_id=pinned)
    else:  # a password session: not in an organization that requires single sign-on of this account
        memberships = memberships.exclude(organization_id__in=password_refusals(request.user))
    memberships = tuple(memberships.order_by("created_at"))
    if not memberships:
        return None
    chosen = request.session.get(SESSION_ORGANIZATION)
    membership = next((m for m in memberships if str(m.organization_id) == chosen), memberships[0])
    return Console(
        user=request.user,
        organization=membership.organization,
        membership=membership,
        memberships=memberships,
    )


def choose_organization(request: HttpRequest, organization_id: str) -> bool:
    """Switches the session to one of the user's organizations; False for any other id."""
    try:
        organization_id = str(uuid.UUID(str(organization_id)))
    except ValueError:
        return False
    pinned = request.session.get(SESSION_PINNED_ORGANIZATION)
    if pinned and pinned != organization_id:
        return False
    if not pinned and organization_id in password_refusals(request.user):
        return False
    if not Membership.objects.filter(user=request.user, organization_id=organization_id).exists():
        return False
    request.session[SESSION_ORGANIZATION] = organization_id
    return True


def forbidden(request: HttpRequest, console: Console | None, message: str) -> HttpResponse:
    return render(request, "console/forbidden.html", {"console": console, "message": message}, status=403)


def console_view(*, role: Role = Role.MEMBER, methods: Iterable[str] = ("GET",)) -> Callable:
    """Decorates ``view(request, console, ...)``: only ``methods``, only a signed-in member of an
    organization whose role is at least ``role``. CSRF is checked by Django's middleware on every
    POST, as on any Django form."""
    allowed = tuple(methods)

    def decorate(view: Callable) -> Callable:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if request.method not in allowed:
                return HttpResponseNotAllowed(allowed)
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path(), settings.CONSOLE_LOGIN_URL)
            console = console_of(request)
            if console is None:
                return forbidden(
                    request,
                    None,
                    "Your account does not belong to any organization it can use with this sign-in yet. "
                    "Ask an owner to invite you, and accept through the link they give you.",
                )
            if not console.can(role):
                return forbidden(request, console, f"This needs the {role} role; yours is {console.role}.")
            request.console = console  # the templates' navigation reads it
            return view(request, console, *args, **kwargs)

        return wrapper

    return decorate


def console_context(request: HttpRequest) -> dict:
    """The console's navigation on the pages accounts serves for a signed-in person (allauth's
    two-factor and reauthentication pages, apps/accounts/views.py); registered in apps/console/apps.py."""
    return {"console": console_of(request)}
