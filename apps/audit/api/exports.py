"""``GET /api/v1/analytics/compliance/export`` and ``GET /api/v1/analytics/policy/export``.

Plain async Django views, not DRF: DRF has no async views, and under ASGI Django reads a sync
iterator of a ``StreamingHttpResponse`` whole before sending it. Here the body is an async
generator reading a chunk at a time (apps/audit/exports.py), so a year of logs leaves in constant memory.
``organization_view`` (apps/organizations/tenancy.py) authenticates them as the management API
does, checks the role and renders every refusal in the management error shape.
"""

import uuid

from django.http import HttpRequest, HttpResponse, QueryDict, StreamingHttpResponse
from django.utils import timezone

from apps.audit import exports
from apps.audit.time_ranges import InvalidParameter, parse_range, text_parameter
from apps.organizations.authentication import SessionContext
from apps.organizations.models import Role
from apps.organizations.tenancy import organization_view
from apps.teams.models import Team

# A member reads the log entry by entry and the analytics (decisions.md), so a member may export the
# policy counts. Every entry of a range, with the bodies the organization keeps, is bulk extraction:
# the compliance export is for admins and owners.
COMPLIANCE_EXPORT_ROLE = Role.ADMIN
POLICY_EXPORT_ROLE = Role.MEMBER


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


def attachment(query: exports.ExportQuery, kind: str, body) -> StreamingHttpResponse:
    """An export as a streamed download: these views', and the console's (apps/console/views/logs.py)."""
    response = StreamingHttpResponse(body, content_type=exports.CONTENT_TYPES[query.export_format])
    response["Content-Disposition"] = f'attachment; filename="{query.filename(kind)}"'
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"  # a buffering reverse proxy would undo the streaming
    return response


@organization_view(role=COMPLIANCE_EXPORT_ROLE)
async def compliance_export(request: HttpRequest, session: SessionContext) -> HttpResponse:
    """Every audit entry of a required range (optionally one team or one policy), oldest first."""
    query = await _export_query(request.GET, session, default_period=None)
    return attachment(query, "compliance", exports.compliance_export(query))


@organization_view(role=POLICY_EXPORT_ROLE)
async def policy_export(request: HttpRequest, session: SessionContext) -> HttpResponse:
    """Policy hits per policy and action, over the range and per day; the last 30 days by default."""
    query = await _export_query(request.GET, session, default_period="30d")
    return attachment(query, "policy", exports.policy_export(query))
