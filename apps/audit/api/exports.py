"""``GET /api/v1/analytics/compliance/export`` and ``GET /api/v1/analytics/policy/export``.

Plain async Django views, not DRF: DRF has no async views, and under ASGI Django reads a sync
iterator of a ``StreamingHttpResponse`` whole before sending it. Here the body is an async
generator reading a chunk at a time (apps/audit/exports.py), so a year of logs leaves in constant memory.
They authenticate exactly as the management API does (``SessionTokenAuthentication``, member
role) and render every error through the management API's exception handler.
"""

import functools
import uuid
from collections.abc import Awaitable, Callable

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, QueryDict, StreamingHttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions as drf
from rest_framework.renderers import JSONRenderer
from rest_framework_simplejwt.exceptions import TokenError

from apps.accounts.authentication import SessionContext, SessionTokenAuthentication
from apps.audit import exports
from apps.audit.periods import InvalidParameter, parse_range, text_parameter
from apps.core.api.exceptions import management_exception_handler
from apps.core.api.tenancy import HasOrganizationRole
from apps.core.errors import GatewayError
from apps.organizations.models import Role
from apps.teams.models import Team

ExportView = Callable[[HttpRequest, SessionContext], Awaitable[HttpResponse]]

_authentication = SessionTokenAuthentication()


def _error_response(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The management API's own handler and renderer, as DRF would call them."""
    response = management_exception_handler(exc, {"request": request, "view": None})
    response.accepted_renderer = JSONRenderer()
    response.accepted_media_type = JSONRenderer.media_type
    response.renderer_context = {"request": request, "response": response}
    if isinstance(exc, drf.MethodNotAllowed):
        response["Allow"] = "GET"
    return response.render()


async def _authenticate(request: HttpRequest) -> SessionContext:
    result = await sync_to_async(_authentication.authenticate)(request)
    if result is None:
        raise drf.NotAuthenticated()
    _, session = result
    if not session.membership.has_role(Role.MEMBER):
        raise drf.PermissionDenied(HasOrganizationRole.message)
    return session


def management_export(view: ExportView) -> Callable[[HttpRequest], Awaitable[HttpResponse]]:
    """GET only, a signed-in member, and errors in the management shape."""

    # Bearer tokens, not cookies, authenticate here: CSRF cannot apply, and a POST must get the
    # JSON 405 rather than Django's HTML CSRF page.
    @csrf_exempt
    @functools.wraps(view)
    async def wrapper(request: HttpRequest) -> HttpResponse:
        try:
            if request.method != "GET":
                raise drf.MethodNotAllowed(request.method)
            session = await _authenticate(request)
            return await view(request, session)
        except (GatewayError, drf.APIException, TokenError) as exc:
            return _error_response(request, exc)

    return wrapper


async def _export_query(
    params: QueryDict, session: SessionContext, *, default_period: str | None
) -> exports.ExportQuery:
    """Every parameter is checked here, before the response starts: once the headers are sent, a
    bad value could only end the export with an error marker, not with a 400."""
    now = timezone.now()  # one instant for the period's end and the header's generation time
    time_range = parse_range(params, default_period=default_period, now=now)

    export_format = text_parameter(params, "export_format", max_length=16)
    if export_format is None:
        export_format = "csv"
    if export_format not in exports.EXPORT_FORMATS:
        raise InvalidParameter("export_format", f"Expected one of {', '.join(exports.EXPORT_FORMATS)}.")

    team_id, team_name = None, None
    if (team := text_parameter(params, "team", max_length=64)) is not None:
        try:
            team_id = uuid.UUID(team)
        except ValueError:
            raise InvalidParameter("team", "Expected a team id (a UUID).") from None
        # A deleted team's entries stay in the log and can still be exported; the header says so.
        team_name = (
            await Team.objects.filter(organization=session.organization, pk=team_id)
            .values_list("name", flat=True)
            .afirst()
        )

    policy = text_parameter(params, "policy", max_length=exports.POLICY_MAX_LENGTH)
    if policy is not None:
        policy = policy.strip()
        if not policy:
            raise InvalidParameter("policy", "Expected a policy name or id (1 to 200 characters).")

    return exports.ExportQuery(
        organization=session.organization,
        range=time_range,
        export_format=export_format,
        generated_at=now,
        team_id=team_id,
        team_name=team_name,
        policy=policy,
    )


def _attachment(query: exports.ExportQuery, kind: str, body) -> StreamingHttpResponse:
    response = StreamingHttpResponse(body, content_type=exports.CONTENT_TYPES[query.export_format])
    response["Content-Disposition"] = f'attachment; filename="{query.filename(kind)}"'
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"  # a buffering reverse proxy would undo the streaming
    return response


@management_export
async def compliance_export(request: HttpRequest, session: SessionContext) -> HttpResponse:
    """Every audit entry of a required range (optionally one team or one policy), oldest first."""
    query = await _export_query(request.GET, session, default_period=None)
    return _attachment(query, "compliance", exports.compliance_export(query))


@management_export
async def policy_export(request: HttpRequest, session: SessionContext) -> HttpResponse:
    """Policy hits per policy and action, over the range and per day; the last 30 days by default."""
    query = await _export_query(request.GET, session, default_period="30d")
    return _attachment(query, "policy", exports.policy_export(query))
