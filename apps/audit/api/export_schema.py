"""The exports in the OpenAPI document.

``apps/audit/api/exports.py`` serves them from plain async Django views (DRF has no async views),
which drf-spectacular never sees; this postprocessing hook (SPECTACULAR_SETTINGS) describes them as
they behave: the same session and role as the rest of the API, a CSV or JSON Lines stream, and
errors in the management shape.
"""

from apps.audit import exports, time_ranges
from apps.core.api.schema import ERROR_DESCRIPTIONS, PYTHON_SPACE

_ERROR = {"$ref": "#/components/schemas/Error"}
# The exports refuse C0 and C1 controls and DEL (time_ranges.CONTROL_CHARACTER_RANGE): the schema too.
_C = time_ranges.CONTROL_CHARACTER_RANGE
_PRINTABLE = rf"^[^{_C}]*$"
_PRINTABLE_NOT_BLANK = rf"^[^{_C}]*[^{PYTHON_SPACE}{_C}][^{_C}]*$"
# parse_instant trims Python's whitespace, but text_parameter refuses the controls among it first.
_PRINTABLE_SPACE = r" \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_RANGE_TEXT = {
    "type": "string",
    "maxLength": time_ranges.INSTANT_MAX_LENGTH,
    "pattern": time_ranges.instant_pattern(_PRINTABLE_SPACE),
    "example": "2026-11-01T00:00:00Z",
}


def _parameter(name: str, schema: dict, description: str) -> dict:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _range_parameters(*, default: str) -> list[dict]:
    return [
        _parameter("from", _RANGE_TEXT, "Start, inclusive: an RFC 3339 timestamp or a date (UTC)."),
        _parameter("to", _RANGE_TEXT, "End, exclusive; needs `from`. Default: now."),
        _parameter(
            "period",
            {"type": "string", "enum": list(time_ranges.PERIODS)},
            f"Ending now; excludes from/to. {default}",
        ),
        _parameter(
            "export_format",
            {"type": "string", "enum": list(exports.EXPORT_FORMATS), "default": "csv"},
            "`csv` (text/csv) or `jsonl` (application/x-ndjson, one JSON object a line).",
        ),
        _parameter("team", {"type": "string", "format": "uuid"}, "Only this team's entries."),
    ]


def _operation(*, operation_id: str, summary: str, description: str, parameters: list[dict]) -> dict:
    body = {"type": "string", "description": "A header block, the rows, and an end marker."}
    errors = {
        str(status): {
            "description": ERROR_DESCRIPTIONS[status],
            "content": {"application/json": {"schema": _ERROR}},
        }
        for status in (400, 401, 403)
    }
    return {
        "operationId": operation_id,
        "summary": summary,
        "description": description,
        "tags": ["analytics"],
        "security": [{"sessionToken": []}],
        "parameters": parameters,
        "responses": {
            "200": {
                "description": "Streamed as an attachment (Content-Disposition), never cached.",
                "headers": {
                    "Content-Disposition": {
                        "schema": {"type": "string"},
                        "description": 'attachment; filename="<kind>-<from>-<to>.<format>"',
                    }
                },
                "content": {
                    "text/csv": {"schema": body},
                    "application/x-ndjson": {"schema": body},
                },
            },
            **errors,
        },
    }


def document_exports(result: dict, generator, request, public) -> dict:
    compliance = _operation(
        operation_id="analytics_compliance_export",
        summary="Every audit entry of a range, oldest first",
        description="A range is required: `from` (and `to`) or `period`. Optionally one team or one policy.",
        parameters=[
            *_range_parameters(default="One of from or period is required."),
            _parameter(
                "policy",
                # Printable, not blank once trimmed: control characters are refused (400).
                {"type": "string", "maxLength": 200, "pattern": _PRINTABLE_NOT_BLANK},
                "Only entries a policy of this name or id decided on.",
            ),
        ],
    )
    policy = _operation(
        operation_id="analytics_policy_export",
        summary="Policy hits per policy and action, over the range and per day",
        description="The last 30 days unless a range is given.",
        parameters=_range_parameters(default="Default: 30d."),
    )
    result["paths"]["/api/v1/analytics/compliance/export"] = {"get": compliance}
    result["paths"]["/api/v1/analytics/policy/export"] = {"get": policy}
    return result
