"""What /api/v1/policies answers, and the dry run's shapes. What a policy's write takes is the
domain's (apps/policies/inputs.py): the services parse the body with it."""

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import is_patched_serializer
from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from apps.core.api.fields import StrictCharField
from apps.core.api.serializers import ClosedSerializer
from apps.policies.inputs import MODEL_LENGTH, PolicyInputSerializer
from apps.policies.models import Action, Policy


# A policy as the API shows it: the input's fields (its request schema) and the read-only ones.
# "Policy" is the policy analytics' component already (apps/audit).
@extend_schema_serializer(component_name="PolicyObject")
class PolicySerializer(PolicyInputSerializer, serializers.ModelSerializer):
    class Meta:
        model = Policy
        fields = (
            "id",
            "name",
            "action",
            "detectors",
            "patterns",
            "terms",
            "denied_models",
            "max_prompt_chars",
            "apply_to_response",
            "order",
            "is_active",
            "scope",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("id", "created_at", "updated_at")

    def to_representation(self, instance: Policy) -> dict:
        data = super().to_representation(instance)
        data["scope"] = {
            "teams": instance.scope_teams,
            "api_keys": instance.scope_api_keys,
            "models": instance.scope_models,
        }
        return data


class PolicySchema(OpenApiSerializerExtension):
    """States ``services._check_whole`` where a policy is created whole: at least one rule, and
    apply_to_response only on a redact policy (a PATCH's outcome depends on the stored policy).
    Left to the 400: scope ids of the organization's teams and keys, patterns that compile (and
    within the organization's budget of patterns)."""

    target_class = PolicySerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        if direction == "request" and not is_patched_serializer(self.target, direction):
            a_rule = [
                {"required": [name], "properties": {name: {"minItems": 1}}}
                for name in ("detectors", "patterns", "terms", "denied_models")
            ]
            schema["allOf"] = [
                {
                    "anyOf": [
                        *a_rule,
                        {
                            "required": ["max_prompt_chars"],
                            "properties": {"max_prompt_chars": {"type": "integer"}},
                        },
                    ]
                },
                # Inside a "not", which postprocess_schema_enums leaves alone (it would turn the
                # enums into components).
                {
                    "not": {
                        "required": ["apply_to_response", "action"],
                        "properties": {
                            "apply_to_response": {"enum": [True]},
                            "action": {"not": {"enum": [Action.REDACT.value]}},
                        },
                    }
                },
            ]
        return schema


@extend_schema_field(
    {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 2048}]}
)
class EmbeddingsInputField(serializers.JSONField):
    pass


@extend_schema_serializer(component_name="PolicyDryRun")
class DryRunSerializer(ClosedSerializer):
    """A sample request: ``messages`` (chat completions) or ``input`` (embeddings)."""

    model = StrictCharField(max_length=MODEL_LENGTH)
    messages = serializers.ListField(child=serializers.DictField(), max_length=1000, required=False)
    input = EmbeddingsInputField(
        required=False, help_text="An embeddings input: a string or a list of strings."
    )
    team = StrictCharField(
        max_length=100, required=False, help_text="A team's id or slug, as the x-gateway-team header."
    )
    api_key = serializers.UUIDField(required=False, help_text="An API key's id.")

    def validate_input(self, value):
        if isinstance(value, str):
            return value
        if isinstance(value, list) and len(value) <= 2048 and all(isinstance(item, str) for item in value):
            return value
        raise serializers.ValidationError("A string or a list of at most 2048 strings.")

    def validate(self, attrs):
        if ("messages" in attrs) == ("input" in attrs):
            raise serializers.ValidationError("Give one of messages or input.")
        return attrs


class DryRunSchema(OpenApiSerializerExtension):
    """States ``DryRunSerializer.validate``: messages or input, exactly one. Left to the 400: a team
    and an API key of the organization."""

    target_class = DryRunSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["oneOf"] = [{"required": ["messages"]}, {"required": ["input"]}]
        return schema


@extend_schema_serializer(component_name="PolicyDecision")
class DecisionSerializer(serializers.Serializer):
    policy = serializers.CharField()
    action = serializers.ChoiceField(choices=["redacted", "blocked", "flagged"])
    category = serializers.CharField()
    count = serializers.IntegerField()


@extend_schema_serializer(component_name="PolicyDryRunResult")
class DryRunResultSerializer(serializers.Serializer):
    action = serializers.CharField(allow_null=True, help_text="redacted, blocked, flagged or null.")
    reason = serializers.CharField(allow_null=True)
    blocked = serializers.BooleanField()
    decisions = DecisionSerializer(many=True)
    messages = serializers.ListField(child=serializers.DictField(), required=False)
    input = EmbeddingsInputField(required=False)
    redacts_response = serializers.BooleanField(
        help_text="Whether a redact policy with apply_to_response would redact the answer."
    )
