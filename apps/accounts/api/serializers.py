from rest_framework import serializers

from apps.accounts.inputs import PASSWORD_LENGTH, PasswordChangeInputSerializer


class LoginSerializer(serializers.Serializer):
    email = serializers.EmailField()
    password = serializers.CharField(trim_whitespace=False, max_length=PASSWORD_LENGTH)
    organization_id = serializers.UUIDField(required=False, allow_null=True)
    code = serializers.CharField(
        required=False,
        max_length=64,
        help_text="The two-factor code (the authenticator app's, or an unused recovery code); required "
        "when the account has two-factor authentication (401 mfa_required without it).",
    )


class SessionSerializer(serializers.Serializer):
    access = serializers.CharField()
    refresh = serializers.CharField()


class RefreshSerializer(serializers.Serializer):
    refresh = serializers.CharField()


class PasswordChangeSerializer(PasswordChangeInputSerializer):
    """The account's current password and the new one (no other field)."""
