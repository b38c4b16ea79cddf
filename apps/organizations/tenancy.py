"""Organization scoping for every management view, in one place.

``OrganizationScopedViewSet`` filters every queryset to the caller's organization and checks the
caller's role; subclasses say what they list with ``get_base_queryset`` and cannot override
``get_queryset`` (refused at class creation), so no view can forget the filter.

``organization_view`` does the same for the plain Django views beside the API (the streamed exports,
console pages): the session is authenticated by the classes DRF uses, the role is checked, and a
refusal answers in the management error shape (401, 403, 405) through the API's exception handler.
"""

import functools
import inspect
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, permissions, serializers, viewsets
from rest_framework.renderers import JSONRenderer
from rest_framework.settings import api_settings
from rest_framework_simplejwt.exceptions import TokenError

from apps.core.api.exceptions import management_exception_handler
from apps.core.errors import GatewayError
from apps.organizations.models import Organization, Role

if TYPE_CHECKING:
    from apps.organizations.authentication import SessionContext


class HasOrganizationRole(permissions.BasePermission):
    """Reading needs ``view.read_role`` (default member); changing needs ``view.write_role``
    (default admin)."""

    message = "Your role in this organization does not allow this."

    def has_permission(self, request, view) -> bool:
        context = request.auth
        membership = getattr(context, "membership", None)
        if membership is None:
            return False
        if request.method in permissions.SAFE_METHODS:
            required = getattr(view, "read_role", Role.MEMBER)
        else:
            required = getattr(view, "write_role", Role.ADMIN)
        return membership.has_role(required)


class OrganizationScopedMixin:
    permission_classes = [permissions.IsAuthenticated, HasOrganizationRole]
    read_role = Role.MEMBER
    write_role = Role.ADMIN
    # The field that ties a row to its organization ("id" for the organization itself).
    organization_field = "organization_id"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "get_queryset" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} overrides get_queryset; override get_base_queryset instead so the "
                "organization filter always applies."
            )

    @property
    def organization(self) -> Organization:
        return self.request.auth.organization

    def get_base_queryset(self):
        return self.queryset.all()

    def get_queryset(self):
        return self.get_base_queryset().filter(**{self.organization_field: self.organization.pk})

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if getattr(self.request, "auth", None) is not None:
            context["organization"] = self.organization
        return context


class OrganizationScopedViewSet(OrganizationScopedMixin, viewsets.GenericViewSet):
    pass


class OrganizationScopedRelatedField(serializers.PrimaryKeyRelatedField):
    """A foreign key that only accepts objects of the caller's organization. Another
    organization's id reads exactly like an id that does not exist."""

    default_error_messages = {
        "does_not_exist": "No such object in this organization.",
        "incorrect_type": "Expected an id string, received {data_type}.",
    }

    def get_queryset(self):
        return super().get_queryset().filter(organization=self.context["organization"])

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("incorrect_type", data_type=type(data).__name__)
        try:
            uuid.UUID(data)
        except ValueError:
            self.fail("does_not_exist", pk_value=data)
        return super().to_internal_value(data)


# --- Plain Django views ----------------------------------------------------------------------------


def authenticate_session(request: HttpRequest, *, role: Role) -> "SessionContext":
    """The session of ``request`` (401 without a valid one), if its role is at least ``role`` (403).

    Runs the authentication classes DRF runs for the API, so a token the API refuses is refused
    here with the same code; synchronous (it reads the database)."""
    for authentication_class in api_settings.DEFAULT_AUTHENTICATION_CLASSES:
        result = authentication_class().authenticate(request)
        if result is not None:
            session = result[1]
            break
    else:
        raise exceptions.NotAuthenticated()
    if not session.membership.has_role(role):
        raise exceptions.PermissionDenied(HasOrganizationRole.message)
    return session


def _error_response(request: HttpRequest, exc: Exception, methods: Iterable[str]) -> HttpResponse:
    """The management API's own handler and renderer, as DRF would call them."""
    response = management_exception_handler(exc, {"request": request, "view": None})
    response.accepted_renderer = JSONRenderer()
    response.accepted_media_type = JSONRenderer.media_type
    response.renderer_context = {"request": request, "response": response}
    if isinstance(exc, exceptions.MethodNotAllowed):
        response["Allow"] = ", ".join(methods)
    return response.render()


_REFUSALS = (GatewayError, exceptions.APIException, TokenError)


def organization_view(*, role: Role, methods: Iterable[str] = ("GET",)) -> Callable:
    """Decorates ``view(request, session)``, sync or async: only ``methods``, only a session of an
    organization with at least ``role``, and every refusal (or ``GatewayError`` the view raises
    before answering) in the management error shape. ``session.organization`` is the only
    organization the view may read."""
    allowed = tuple(methods)

    def decorate(view: Callable) -> Callable:
        if inspect.iscoroutinefunction(view):

            async def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
                try:
                    if request.method not in allowed:
                        raise exceptions.MethodNotAllowed(request.method)
                    session = await sync_to_async(authenticate_session)(request, role=role)
                    return await view(request, session, *args, **kwargs)
                except _REFUSALS as exc:
                    return _error_response(request, exc, allowed)

        else:

            def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
                try:
                    if request.method not in allowed:
                        raise exceptions.MethodNotAllowed(request.method)
                    return view(request, authenticate_session(request, role=role), *args, **kwargs)
                except _REFUSALS as exc:
                    return _error_response(request, exc, allowed)

        # Bearer tokens, not cookies, authenticate here: CSRF cannot apply, and a refused method
        # must get the JSON 405 rather than Django's HTML CSRF page.
        return csrf_exempt(functools.wraps(view)(wrapper))

    return decorate
