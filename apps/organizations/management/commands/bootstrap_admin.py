from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.accounts.models import User
from apps.core.errors import InvalidRequest
from apps.organizations.models import Organization
from apps.organizations.services import first_admin_bootstrap


class Command(BaseCommand):
    help = (
        "Creates the first organization and its owner when the gateway has none. Reads "
        "GATEWAY_ADMIN_EMAIL / GATEWAY_ADMIN_PASSWORD / GATEWAY_ORG_NAME; without a password one is "
        "generated and printed once. Does nothing when an organization exists."
    )

    def add_arguments(self, parser):
        parser.add_argument("--email", default=None)
        parser.add_argument("--organization", default=None)

    def handle(self, *args, email=None, organization=None, **options):
        from gateway_project.env import env

        email = email or env.str("GATEWAY_ADMIN_EMAIL", default="admin@example.com")
        password = env.str("GATEWAY_ADMIN_PASSWORD", default="") or None
        organization_name = organization or env.str("GATEWAY_ORG_NAME", default="My organization")
        if password and not Organization.objects.exists():  # make run calls this on every start
            _validate(password, email)
        try:
            result = first_admin_bootstrap(
                email=email, password=password, organization_name=organization_name
            )
        except InvalidRequest as error:  # the name, checked as the organization's input (inputs.py)
            raise CommandError(f"GATEWAY_ORG_NAME is refused: {error.message}") from error
        if result is None:
            if options["verbosity"] >= 1:  # `make run` asks with 0: nothing to say on every start
                self.stdout.write("An organization exists already; nothing to do.")
            return
        org, user, generated_password = result
        self.stdout.write(self.style.SUCCESS(f"Created organization '{org.name}' with owner {user.email}."))
        if generated_password:
            self.stdout.write(
                self.style.WARNING(
                    f"Generated password for {user.email}: {generated_password}\n"
                    "It is shown only this once: keep it, or set GATEWAY_ADMIN_PASSWORD before the "
                    "first run."
                )
            )
        self.stdout.write("Sign in on the console (/console/), or with POST /api/v1/auth/login.")


def _validate(password: str, email: str) -> None:
    """The owner is a superuser: their password passes AUTH_PASSWORD_VALIDATORS like any other."""
    try:
        validate_password(password, user=User(email=email))
    except ValidationError as error:
        raise CommandError(
            "GATEWAY_ADMIN_PASSWORD is refused by the password validators: "
            + " ".join(error.messages)
            + " Choose another, or leave it unset to have one generated."
        ) from error
