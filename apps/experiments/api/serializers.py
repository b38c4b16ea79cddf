"""What /api/v1/experiments answers, and the shapes of /api/v1/feedback. What an experiment's write
takes is the domain's (apps/experiments/inputs.py): the services parse the body with it."""

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import StrictCharField, StrictRegexField, StrictUUIDField
from apps.core.api.serializers import ClosedSerializer
from apps.experiments import services
from apps.experiments.inputs import TARGET_SCHEMA, VARIANT_NAME, ExperimentInputSerializer
from apps.experiments.models import Experiment, Feedback, PendingFeedback, Variant


class VariantSerializer(serializers.ModelSerializer):
    model = serializers.SerializerMethodField()

    class Meta:
        model = Variant
        fields = ("name", "weight", "model", "prompt_version", "parameters")

    def get_model(self, variant) -> str | None:
        return variant.model or None


class ExperimentSerializer(serializers.ModelSerializer):
    target = serializers.SerializerMethodField()
    variants = VariantSerializer(many=True, read_only=True)
    winner = serializers.SerializerMethodField()

    class Meta:
        model = Experiment
        fields = (
            "id",
            "name",
            "target",
            "status",
            "variants",
            "started_at",
            "completed_at",
            "winner",
            "promoted_at",
            "promoted_by",
            "promotion",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields

    @extend_schema_field(TARGET_SCHEMA)
    def get_target(self, experiment) -> dict:
        return services.target_of(experiment)

    def get_winner(self, experiment) -> str | None:
        return experiment.winner.name if experiment.winner_id else None


class ExperimentInputSchema(OpenApiSerializerExtension):
    """States the one rule of the services' ``_variants`` between fields that a body shows: a
    variant sets a prompt version only in an experiment on a prompt template (a PATCH without a
    target is judged with the stored one). Left to the 400: models and versions that exist, distinct
    names, weights that sum to more than 0."""

    target_class = ExperimentInputSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        if direction == "request":
            no_version = {"properties": {"prompt_version": {"enum": [None], "nullable": True}}}
            schema["anyOf"] = [
                {"properties": {"target": {"required": ["prompt"]}}},
                {"properties": {"variants": {"items": no_version}}},
            ]
        return schema


class PromoteSerializer(ClosedSerializer):
    variant = StrictRegexField(VARIANT_NAME.pattern, max_length=100)


class FeedbackInputSerializer(serializers.Serializer):
    # Open, as the schema says: an application's extra fields are ignored, not refused.
    request_id = StrictUUIDField()
    score = serializers.FloatField(
        required=False, min_value=-services.SCORE_LIMIT, max_value=services.SCORE_LIMIT
    )
    label = StrictCharField(max_length=services.LABEL_LENGTH, required=False)
    comment = StrictCharField(
        max_length=services.COMMENT_LENGTH, required=False, allow_blank=True, trim_whitespace=False
    )

    def validate_score(self, value):
        if isinstance(self.initial_data.get("score"), bool | str):
            raise serializers.ValidationError("A number.")
        return value


class FeedbackSerializer(serializers.ModelSerializer):
    status = serializers.SerializerMethodField(help_text="recorded: the request's feedback, as it now is.")

    class Meta:
        model = Feedback
        fields = (
            "id",
            "status",
            "request_id",
            "score",
            "label",
            "comment",
            "api_key_id",
            "user",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields

    def get_status(self, _) -> str:
        return "recorded"


class PendingFeedbackSerializer(serializers.ModelSerializer):
    """What a post on a request whose audit entry is not written yet sent, as it waits (202): the
    ``id`` is the post's, not the feedback's; fields not sent are null."""

    status = serializers.SerializerMethodField(
        help_text="pending: attached when the request's entry is written."
    )

    class Meta:
        model = PendingFeedback
        fields = (
            "id",
            "status",
            "request_id",
            "score",
            "label",
            "comment",
            "api_key_id",
            "user",
            "created_at",
        )
        read_only_fields = fields

    def get_status(self, _) -> str:
        return "pending"
