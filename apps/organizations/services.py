import secrets

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.utils.text import slugify

from apps.accounts.models import User
from apps.core.errors import Conflict, InvalidRequest
from apps.core.generations import bump_generation
from apps.core.model_patterns import checked_model_patterns
from apps.limits.services import UNSET, limits_set
from apps.teams.models import TeamMembership

from .models import Membership, Organization, Role


def unique_organization_slug(name: str) -> str:
    base = slugify(name)[:60] or "org"
    slug = base
    while Organization.objects.filter(slug=slug).exists():
        slug = f"{base}-{secrets.token_hex(3)}"
    return slug


@transaction.atomic
def organization_create(*, name: str, owner: User, plan: str = "free", **settings) -> Organization:
    """``settings``: log_bodies, log_retention_days, allowed_data_regions, allowed_models (the model's
    defaults otherwise)."""
    if "allowed_models" in settings:
        settings["allowed_models"] = checked_model_patterns(settings["allowed_models"])
    organization = Organization.objects.create(
        name=name, slug=unique_organization_slug(name), plan=plan, **settings
    )
    Membership.objects.create(organization=organization, user=owner, role=Role.OWNER)
    return organization


def organization_update(*, organization: Organization, **changes) -> Organization:
    if "allowed_models" in changes:
        changes["allowed_models"] = checked_model_patterns(changes["allowed_models"])
    for field, value in changes.items():
        setattr(organization, field, value)
    organization.save(update_fields=[*changes, "updated_at"])
    bump_generation(organization.id)  # allowed regions and models shape routing
    return organization


def organization_settings_update(
    *, organization: Organization, budget=UNSET, rate_limits=UNSET, default_price=UNSET, **changes
) -> Organization:
    """The organization's name and settings with its own budget and rate limits and its default price
    for unpriced models (``catalog.services.default_price_set``), in one transaction: a budget
    ``limits_set`` refuses leaves the other settings unchanged too."""
    from apps.catalog.services import default_price_set  # the catalog's models import this app's

    with transaction.atomic():
        organization_update(organization=organization, **changes)
        limits_set(organization=organization, budget=budget, rate_limits=rate_limits)
        if default_price is not UNSET:
            default_price_set(organization=organization, price=default_price)
    return organization


@transaction.atomic
def organization_delete(*, organization: Organization) -> None:
    """Deletes the organization with everything it owns. The bumped generation makes every proxy
    worker drop its copy on the next request. (The admin refuses while the organization has API
    keys: keys are never deleted, so the audit trail stays whole.)"""
    organization_id = organization.id
    organization.delete()
    bump_generation(organization_id)


@transaction.atomic
def first_admin_bootstrap(
    *, email: str, password: str | None, organization_name: str
) -> tuple[Organization, User, str | None] | None:
    """Creates the first organization and its owner when the gateway has none yet.

    Returns None when an organization exists already. The generated password (when none was given)
    is returned so the caller can show it once; it is never stored in clear.
    """
    if Organization.objects.exists():
        return None
    generated = None
    user = User.objects.filter(email__iexact=email).first()
    if user is None:
        if not password:
            generated = password = secrets.token_urlsafe(18)
        user = User.objects.create_superuser(email=email, password=password)
    organization = organization_create(name=organization_name, owner=user, plan="enterprise")
    return organization, user, generated


# --- Members ---------------------------------------------------------------------------------------
# Memberships shape no proxy configuration: no generation is bumped. Sessions read the membership and
# its role on every request (apps/accounts/authentication.py, apps/console/access.py), so a change of
# role or a removal applies to the member's next request.


def _invalid(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, code="validation_error", param=field, fields={field: [message]})


def _checked_role(role: str) -> Role:
    if role not in Role.values:
        raise _invalid("role", f"One of {', '.join(Role.values)}.")
    return Role(role)


def _last_owner() -> Conflict:
    return Conflict(
        "An organization keeps at least one owner: make another member an owner first.",
        code="last_owner",
        param="role",
    )


def _owner_ids_locked(organization_id) -> list:
    """The owners' membership ids, locked until the transaction ends, so two owners demoting each
    other at the same moment cannot leave the organization with none."""
    return list(
        Membership.objects.select_for_update()
        .filter(organization_id=organization_id, role=Role.OWNER)
        .values_list("id", flat=True)
    )


@transaction.atomic
def membership_add(
    *, organization: Organization, email: str, role: str = Role.MEMBER, password: str | None = None
) -> Membership:
    """Adds the person with ``email`` to the organization with ``role``. A new person gets an account:
    with ``password`` when one is given (checked by the password validators), otherwise with an
    unusable password, so they sign in through the organization's SSO or once someone sets a password
    for them. An existing account keeps its own password: ``password`` only ever applies to a new one."""
    email = User.objects.normalize_email((email or "").strip()).lower()
    try:
        validate_email(email)
    except ValidationError:
        raise _invalid("email", "Enter a valid email address.") from None
    role = _checked_role(role)
    user = User.objects.filter(email__iexact=email).first()
    if user is None:
        if password:
            try:
                validate_password(password, user=User(email=email))
            except ValidationError as error:
                raise InvalidRequest(
                    error.messages[0],
                    code="validation_error",
                    param="password",
                    fields={"password": error.messages},
                ) from None
        user = User.objects.create_user(email=email, password=password or None)
    elif Membership.objects.filter(organization=organization, user=user).exists():
        raise Conflict(
            f"{email} is a member of this organization already.", code="already_a_member", param="email"
        )
    try:
        with transaction.atomic():
            return Membership.objects.create(organization=organization, user=user, role=role)
    except IntegrityError as error:  # added by a concurrent request between the check and the insert
        raise Conflict(
            f"{email} is a member of this organization already.", code="already_a_member", param="email"
        ) from error


@transaction.atomic
def membership_change_role(*, membership: Membership, role: str) -> Membership:
    """Gives the member ``role``; the organization's last owner cannot stop being one."""
    role = _checked_role(role)
    owners = _owner_ids_locked(membership.organization_id)
    membership.refresh_from_db(fields=["role"])
    if membership.role == Role.OWNER and role != Role.OWNER and owners == [membership.id]:
        raise _last_owner()
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership) -> None:
    """Removes the member from the organization and from its teams; the account itself stays (it may
    belong to other organizations). The last owner cannot be removed."""
    owners = _owner_ids_locked(membership.organization_id)
    membership.refresh_from_db(fields=["role"])
    if membership.role == Role.OWNER and owners == [membership.id]:
        raise _last_owner()
    TeamMembership.objects.filter(
        user_id=membership.user_id, team__organization_id=membership.organization_id
    ).delete()
    membership.delete()
