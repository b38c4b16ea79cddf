import uuid

from django.contrib.auth.models import AbstractUser, BaseUserManager
from django.db import models


class UserManager(BaseUserManager):
    use_in_migrations = True

    def _create_user(self, email: str, password: str | None, **extra_fields) -> "User":
        if not email:
            raise ValueError("A user needs an email address")
        user = self.model(email=self.normalize_email(email).lower(), **extra_fields)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_user(self, email: str, password: str | None = None, **extra_fields) -> "User":
        extra_fields.setdefault("is_staff", False)
        extra_fields.setdefault("is_superuser", False)
        return self._create_user(email, password, **extra_fields)

    def create_superuser(self, email: str, password: str | None = None, **extra_fields) -> "User":
        extra_fields.setdefault("is_staff", True)
        extra_fields.setdefault("is_superuser", True)
        extra_fields.setdefault("email_verified", True)  # the operator names the address
        return self._create_user(email, password, **extra_fields)


class User(AbstractUser):
    """A person who signs in to the management API or the console; identified by email."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    username = None
    email = models.EmailField(unique=True)
    # Whether the gateway knows that whoever holds this account's credentials owns its address
    # (docs/security.md, "Squatting an address through an invitation link"). True for accounts the
    # operator made (bootstrap_admin, createsuperuser, the Django admin) or single sign-on made or
    # reclaimed for a domain its organization proved, and for every account that existed before the
    # field; false for an account made through an invitation's link, which proves only that one held
    # the link (the gateway sends no mail: the inviter sees the link too). Only a verified account
    # accepts an invitation to its address without the invitation's own link. Not allauth's
    # EmailAddress: the gateway keeps no rows there (one address per account, ``email`` is the
    # sign-in, ACCOUNT_EMAIL_VERIFICATION is "none"), and a second table would be a second truth.
    email_verified = models.BooleanField(
        default=False,
        help_text="Whether the account's owner has proved its address (the operator made the account, "
        "or single sign-on from a proved domain). An account made through an invitation link has not.",
    )

    USERNAME_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []

    objects = UserManager()

    def __str__(self) -> str:
        return self.email
