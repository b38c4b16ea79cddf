"""What the OpenAPI document says beyond what drf-spectacular infers: every error an operation can
answer, and the streaming exports, which are plain async views DRF never sees.

Scripts generate clients from this document and schemathesis checks the API against it
(tests/management/test_schemathesis.py), so an answer the document does not list is a bug in one
of the two.
"""

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import serializers

from apps.core.api.fields import PYTHON_SPACE, StrictCharField
from apps.core.api.serializers import ClosedSerializer

ERROR_DESCRIPTIONS = {
    400: "Invalid input: `validation_error` (with `fields`), `parse_error` or an operation's own code.",
    401: "No session token, or an invalid or expired one.",
    403: "The caller's role does not allow this.",
    404: "No such object in the caller's organization, or a forged cursor.",
    409: "The change conflicts with the current state (a name taken, an object in use).",
    413: "The request body is too large.",
    415: "The body is not `application/json`.",
    429: "Too many attempts; retry after `Retry-After` seconds.",
}

ErrorSerializer = inline_serializer(
    name="Error",
    fields={
        "error": inline_serializer(
            name="ErrorDetail",
            fields={
                "type": serializers.CharField(
                    read_only=True, help_text="invalid_request_error, authentication_error ..."
                ),
                "code": serializers.CharField(
                    read_only=True, help_text="Stable, for programs: validation_error, not_found ..."
                ),
                "message": serializers.CharField(read_only=True, help_text="For people."),
                "fields": serializers.DictField(
                    child=serializers.ListField(child=serializers.CharField(read_only=True)),
                    required=False,  # not read_only: drf-spectacular marks every read-only field required
                    help_text="Validation errors only: the messages per field.",
                ),
            },
        )
    },
)

_WRITE_METHODS = {"POST", "PUT", "PATCH"}
_NO_NUL = r"^[^\u0000]*$"
_NOT_BLANK = rf"^[^\u0000]*[^{PYTHON_SPACE}\u0000][^\u0000]*$"
_PLAIN_TEXT_FIELDS = (serializers.CharField, StrictCharField)


def _in_query(parameter) -> bool:
    # A serializer there describes query filters; an OpenApiParameter says where it goes.
    return not isinstance(parameter, OpenApiParameter) or parameter.location == OpenApiParameter.QUERY


class ManagementAutoSchema(AutoSchema):
    """Adds the error answers to every operation, from what the operation is: a session-protected
    one can answer 401 and 403, one with a body or query filters 400, one with a path id or a cursor
    404. A view names the rest per action (or per method for plain views) in
    ``error_statuses``, e.g. ``{"create": (409,)}``."""

    def _insert_field_validators(self, field, schema):
        super()._insert_field_validators(field, schema)
        # DRF refuses NUL in every string and, where blank is not allowed, a string that is blank
        # once trimmed; a field with a pattern or format of its own says more already.
        if (
            type(field) in _PLAIN_TEXT_FIELDS
            and not field.read_only
            and schema.get("type") == "string"
            and not {"pattern", "format", "oneOf", "enum"} & set(schema)
        ):
            blank_allowed = field.allow_blank or not field.trim_whitespace
            schema["pattern"] = _NO_NUL if blank_allowed else _NOT_BLANK
        # DRF checks a trimmed field's length once it has trimmed it, so a maxLength (which counts
        # the blanks around) would refuse what the API takes: such a field's pattern bounds the
        # trimmed value itself.
        if hasattr(field, "trimmed_pattern") and not field.read_only:
            schema["pattern"] = field.trimmed_pattern()
            schema.pop("maxLength", None)
            schema.pop("minLength", None)

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        # A closed serializer refuses a field it does not know ("Unknown field."): its body says so.
        if direction == "request" and isinstance(serializer, ClosedSerializer):
            schema["additionalProperties"] = False
        return schema

    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        # A list that may not be empty (DRF's allow_empty=False) says so where it is written; an
        # answer may still hold an empty one (an object written before the rule).
        if (
            direction == "request"
            and isinstance(schema, dict)
            and schema.get("type") == "array"
            and getattr(field, "allow_empty", True) is False
        ):
            schema["minItems"] = max(schema.get("minItems", 0), 1)
        return schema

    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        # Filters of a query serializer that reads an empty value as none (``?team=&model=``, as a
        # filter form submits them) say so, or a client generator would refuse to send them.
        empty_allowed = {
            name
            for parameter in self.get_override_parameters()
            if getattr(parameter, "empty_values_are_absent", False)
            for name in parameter().fields
        }
        for parameter in (operation or {}).get("parameters", ()):
            if parameter["in"] == "query" and parameter["name"] in empty_allowed:
                parameter["allowEmptyValue"] = True
        return operation

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        for status in sorted(self._error_statuses()):
            responses.setdefault(str(status), self._error_response(status, direction))
        return responses

    def _error_response(self, status: int, direction):
        response = self._get_response_for_code(ErrorSerializer, str(status), direction=direction)
        response["description"] = ERROR_DESCRIPTIONS[status]
        return response

    def _error_statuses(self) -> set[int]:
        statuses: set[int] = set()
        if self.get_auth():
            statuses |= {401, 403}
        if self.method in _WRITE_METHODS:
            statuses |= {400, 413, 415}
        if any(_in_query(parameter) for parameter in self.get_override_parameters()):
            statuses.add(400)
        if self._is_list_view() and self._get_paginator() is not None:
            statuses |= {400, 404}  # a bad limit; a forged cursor
        if "{" in self.path:
            statuses.add(404)
        declared = getattr(self.view, "error_statuses", {})
        action = getattr(self.view, "action", None) or self.method.lower()
        statuses.update(declared.get(action, ()))
        return statuses
