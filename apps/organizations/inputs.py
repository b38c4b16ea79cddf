"""What is written to an organization, its members and its invitations (the organization's own part of
``PATCH /api/v1/organizations/current``, the body of ``POST /api/v1/organizations/current/invitations``,
the admin's forms, the console's): their types and shapes, defined once. The services parse their raw
input with these (apps/core/api/serializers.py ``validated``) before what a schema cannot say (the
model allow-list's patterns, an address that is a member already, the last owner, a password the
validators refuse); the API's schema is written from them.

None is closed: the API's serializers have always passed over a field they do not know here. (The
serializers have no docstring: the API's schema would take it as its components' description.)"""

from decimal import ROUND_HALF_EVEN, Decimal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import (
    DataRegionsField,
    ModelPatternsField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
)

from .models import CACHE_TTL_MAX_SECONDS, FailMode, LogBodies, Plan, Role

NAME_LENGTH = 200
EMAIL_LENGTH = 254


def name_field(**kwargs) -> StrictCharField:
    return StrictCharField(max_length=NAME_LENGTH, **kwargs)


def cache_ttl_field(**kwargs) -> StrictIntegerField:
    """Also a team's cache TTL (apps/teams)."""
    return StrictIntegerField(
        min_value=1,
        max_value=CACHE_TTL_MAX_SECONDS,
        help_text="Seconds a cached answer may be served again (1 to 30 days).",
        **kwargs,
    )


@extend_schema_field({"type": "number", "minimum": 0, "maximum": 1, "example": 0.95})
class SimilarityThresholdField(serializers.Field):
    """A JSON number from 0 to 1, kept to 4 decimal places (a float would drift in the database).
    A ``Decimal`` passes too: no JSON body holds one, but the admin's form (the model's field) and the
    organization's settings (apps/organization_settings, which parsed the body) give one."""

    default_error_messages = {"invalid": "A number from 0 to 1."}
    PLACES = Decimal("0.0001")

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float | Decimal) or not 0 <= data <= 1:
            self.fail("invalid")
        return Decimal(str(data)).quantize(self.PLACES, rounding=ROUND_HALF_EVEN)

    def to_representation(self, value):
        return float(value)


# The organization's own settings, in the order of the API's "settings" object, which adds the
# budget, rate limits and default price of the domains above (apps/organization_settings/api).
class OrganizationSettingsInputSerializer(serializers.Serializer):
    log_bodies = serializers.ChoiceField(choices=LogBodies.choices, required=False)
    log_retention_days = serializers.IntegerField(min_value=1, max_value=3650, required=False)
    allowed_data_regions = DataRegionsField(required=False)
    allowed_models = ModelPatternsField()
    limits_fail_mode = serializers.ChoiceField(
        choices=FailMode.choices,
        required=False,
        help_text="While Redis cannot be reached: open serves without checking budgets and rate limits, "
        "closed refuses (503) the requests they apply to.",
    )
    # The response cache (docs/cache.md); a team may override the first two.
    cache_enabled = StrictBooleanField(required=False)
    cache_ttl_seconds = cache_ttl_field(required=False)
    cache_any_temperature = StrictBooleanField(
        required=False,
        help_text="False: only requests with an explicit temperature of 0 are cached; true: any request.",
    )
    cache_semantic_enabled = StrictBooleanField(
        required=False,
        help_text="The semantic tier (L3): a similar earlier prompt's answer is served. Needs "
        "cache_embedding_model.",
    )
    cache_semantic_threshold = SimilarityThresholdField(
        required=False, help_text="The cosine similarity from which L3 serves an earlier answer."
    )
    cache_embedding_model = StrictCharField(
        max_length=200,
        allow_blank=True,
        required=False,
        help_text="An embeddings model alias of the organization's catalog, for L3; blank for none.",
    )


# What ``organization_create`` and ``organization_update`` (partial) take: the name and the settings,
# and the operator's slug and plan, which only the Django admin writes (the API shows them read only:
# its serializer has no such field, so its body never brings them here).
class OrganizationInputSerializer(OrganizationSettingsInputSerializer):
    name = name_field()
    slug = serializers.SlugField(max_length=80, required=False)
    plan = serializers.ChoiceField(choices=Plan.choices, required=False)


# A member's role (``membership_change_role``).
class MembershipInputSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


# An invitation (``invitation_create``); the API's InvitationCreateSerializer is these.
class InvitationInputSerializer(serializers.Serializer):
    email = serializers.EmailField(max_length=EMAIL_LENGTH)
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)


# The password an invited person without an account chooses (``invitation_sign_up``). Blank and
# untrimmed: what a password may be is the validators' (AUTH_PASSWORD_VALIDATORS), asked by the
# service, so "" is refused with their reasons, as before.
class InvitationSignUpInputSerializer(serializers.Serializer):
    password = StrictCharField(allow_blank=True, trim_whitespace=False)
