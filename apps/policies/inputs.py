"""A policy as it is written (the body of POST and PATCH /api/v1/policies, the admin's form, the
console's form): its types and shapes, defined once. ``policy_create`` and ``policy_update`` parse
their raw input with these before what a schema cannot say (patterns that compile, within the
organization's bound; scope ids of the organization's teams and keys; at least one rule;
apply_to_response only when redacting; a name taken); the API's schema is written from them."""

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from apps.core.api.fields import StrictBooleanField, StrictCharField, StrictUUIDField
from apps.core.api.schema import PYTHON_SPACE
from apps.core.api.serializers import ClosedSerializer
from apps.core.detectors import DETECTOR_NAMES

from .models import Action

NAME_LENGTH = 100
PATTERNS_LIMIT = 50
PATTERN_LENGTH = 1000
TERMS_LIMIT = 200
TERM_LENGTH = 200
MODELS_LIMIT = 100
MODEL_LENGTH = 200
SCOPE_LIMIT = 100
MAX_PROMPT_CHARS = 100_000_000
ORDER_LIMIT = 1_000_000

# Not blank once trimmed, and no control character (below U+0020) inside.
_S = PYTHON_SPACE
_C = r"\u0000-\u001f"


class PolicyTextField(StrictCharField):
    """A name, term or model of a policy: trimmed and not blank (no control character inside: the
    policy's ``validate``, which names the list rather than the item)."""

    def trimmed_pattern(self) -> str:
        inside = f"{{0,{self.max_length - 2}}}"
        return rf"^[{_S}]*[^{_S}{_C}](?:[^{_C}]{inside}[^{_S}{_C}])?[{_S}]*$"


def _strings(length: int, limit: int, **kwargs) -> serializers.ListField:
    return serializers.ListField(
        child=PolicyTextField(max_length=length), max_length=limit, required=False, **kwargs
    )


@extend_schema_serializer(component_name="PolicyScope")
class ScopeSerializer(ClosedSerializer):
    teams = serializers.ListField(
        child=StrictUUIDField(),
        max_length=SCOPE_LIMIT,
        required=False,
        help_text="Team ids; empty: every team (and requests without one).",
    )
    api_keys = serializers.ListField(
        child=StrictUUIDField(),
        max_length=SCOPE_LIMIT,
        required=False,
        help_text="API key ids; empty: every key.",
    )
    models = _strings(MODEL_LENGTH, MODELS_LIMIT, help_text="Models as requests name them; empty: all.")


# A policy's writable fields; the API's PolicySerializer is these and the read-only ones. (No
# docstring: the API's schema takes the nearest one as its component's description.)
class PolicyInputSerializer(ClosedSerializer):
    name = PolicyTextField(max_length=NAME_LENGTH)
    action = serializers.ChoiceField(choices=Action.values)
    detectors = serializers.ListField(
        child=serializers.ChoiceField(choices=DETECTOR_NAMES),
        max_length=len(DETECTOR_NAMES),
        required=False,
    )
    patterns = serializers.ListField(
        child=StrictCharField(max_length=PATTERN_LENGTH, trim_whitespace=False),
        max_length=PATTERNS_LIMIT,
        required=False,
        help_text="Regular expressions (Python's `regex` package); a match is `[REDACTED:pattern]`.",
    )
    terms = _strings(
        TERM_LENGTH,
        TERMS_LIMIT,
        help_text="Denied words or phrases: case-insensitive, whole words.",
    )
    denied_models = _strings(MODEL_LENGTH, MODELS_LIMIT)
    max_prompt_chars = serializers.IntegerField(
        min_value=1, max_value=MAX_PROMPT_CHARS, allow_null=True, required=False
    )
    apply_to_response = StrictBooleanField(required=False, help_text="Redact policies only.")
    order = serializers.IntegerField(min_value=-ORDER_LIMIT, max_value=ORDER_LIMIT, required=False)
    is_active = StrictBooleanField(required=False)
    scope = ScopeSerializer(required=False)

    def validate(self, attrs):
        """No control character in a name, term or model: refused by field (a list, not its item),
        every field at fault at once, and only once every value has its shape."""
        errors: dict = {}
        for field in ("name", "terms", "denied_models"):
            if field in attrs and _controls(attrs[field]):
                errors[field] = [CONTROL_CHARACTERS]
        if _controls(attrs.get("scope", {}).get("models", ())):
            errors["scope"] = {"models": [CONTROL_CHARACTERS]}
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


CONTROL_CHARACTERS = "May not contain control characters."


def _controls(value) -> bool:
    texts = [value] if isinstance(value, str) else value
    return any(ord(character) < 32 for text in texts for character in text)
