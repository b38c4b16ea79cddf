"""What is written to an account (the body of ``POST /api/v1/auth/password``, the console's form): its
types and shape, defined once. The service parses its raw input with it (apps/core/api/serializers.py
``validated``) before what a schema cannot say (the current password, the validators); the API's
schema is written from it. (No docstring on the serializer: the schema would take it as its
component's description.)"""

from apps.core.api.fields import StrictCharField
from apps.core.api.serializers import ClosedSerializer

# The login's bound too: every password given is hashed, and a longer one only costs the server time.
PASSWORD_LENGTH = 1024


class PasswordChangeInputSerializer(ClosedSerializer):
    current_password = StrictCharField(max_length=PASSWORD_LENGTH, trim_whitespace=False)
    # Blank allowed: what a password may be is the validators' (AUTH_PASSWORD_VALIDATORS), asked by
    # the service, so "" is refused with their reasons.
    new_password = StrictCharField(max_length=PASSWORD_LENGTH, trim_whitespace=False, allow_blank=True)
