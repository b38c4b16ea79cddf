"""Writes of organizations, their members and their invitations.

Each write's input is parsed once, here, by its serializer in the domain (inputs.py, also the API's
request schema) through apps/core/api/serializers.py ``validated``: the API's views, the admins and
the console pass their input through (``data=``), and the services check only what a schema cannot
say (the model allow-list's patterns, an address that is a member already or invited, the last owner,
a password that Django's validators refuse). The organization's settings of every domain are composed
above (apps/organization_settings/services.py), which calls ``organization_update``."""

import secrets
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from django.utils.text import slugify

from apps.accounts.models import User
from apps.core.api.serializers import validated
from apps.core.errors import Conflict, InvalidRequest, NotFound
from apps.core.generations import bump_generation
from apps.core.model_patterns import checked_model_patterns

from .departures import depart
from .inputs import (
    InvitationInputSerializer,
    InvitationSignUpInputSerializer,
    MembershipInputSerializer,
    OrganizationInputSerializer,
)
from .models import Invitation, InvitationStatus, Membership, Organization, Role, invitation_token_digest


def unique_organization_slug(name: str) -> str:
    base = slugify(name)[:60] or "org"
    slug = base
    while Organization.objects.filter(slug=slug).exists():
        slug = f"{base}-{secrets.token_hex(3)}"
    return slug


def organization_check(*, data: Mapping, partial: bool = False) -> dict[str, Any]:
    """``data`` (inputs.py ``OrganizationInputSerializer``; ``partial``: a change's, only the fields
    it names) as an organization stores it: the model allow-list's patterns checked and each kept
    once (``checked_model_patterns``; null, the empty list)."""
    values = dict(validated(OrganizationInputSerializer, data, partial=partial))
    if "allowed_models" in values:
        values["allowed_models"] = checked_model_patterns(values["allowed_models"])
    return values


@transaction.atomic
def organization_create(*, owner: User, data: Mapping) -> Organization:
    """The organization ``data`` describes (``organization_check``: its name, and any of its plan
    (free by default) and settings, the model's defaults otherwise), with ``owner`` as its owner; its
    slug is made from its name."""
    values = organization_check(data=data)
    values["slug"] = unique_organization_slug(values["name"])
    organization = Organization.objects.create(**values)
    Membership.objects.create(organization=organization, user=owner, role=Role.OWNER)
    return organization


def organization_update(*, organization: Organization, data: Mapping) -> Organization:
    """Applies ``data`` (any of the fields of ``organization_check``, as a change names them)."""
    checked = organization_check(data=data, partial=True)
    # Compared with the stored row, not the instance: the admin's form has set its fields already.
    stored = Organization.objects.filter(pk=organization.pk).values(*checked).first() or {}
    changes = {field: value for field, value in checked.items() if stored.get(field) != value}
    if not changes:  # the same values again, or settings it does not know: nothing to write or reload
        return organization
    for field, value in changes.items():
        setattr(organization, field, value)
    organization.save(update_fields=[*changes, "updated_at"])
    bump_generation(organization.id)  # allowed regions and models shape routing
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
    elif not user.email_verified:
        user.email_verified = True  # the operator names the address
        user.save(update_fields=["email_verified"])
    organization = organization_create(owner=user, data={"name": organization_name, "plan": "enterprise"})
    return organization, user, generated


# --- Members ---------------------------------------------------------------------------------------
# Memberships shape no proxy configuration: no generation is bumped. Sessions read the membership and
# its role on every request (apps/organizations/authentication.py, apps/console/access.py), so a
# change of role or a removal applies to the member's next request. Nobody is made a member of an
# organization without their consent: an owner invites an address, and the account with that address
# accepts (the invitations below). Single sign-on adds members just in time, only for a domain the
# organization has proved (apps/sso).


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
def membership_change_role(*, membership: Membership, data: Mapping) -> Membership:
    """Gives the member the role of ``data`` (inputs.py ``MembershipInputSerializer``); the
    organization's last owner cannot stop being one."""
    role = validated(MembershipInputSerializer, data)["role"]
    owners = _owner_ids_locked(membership.organization_id)
    membership.refresh_from_db(fields=["role"])
    if membership.role == Role.OWNER and role != Role.OWNER and owners == [membership.id]:
        raise _last_owner()
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership) -> None:
    """Removes the member from the organization and from its teams (apps/organizations/departures.py);
    the account itself stays (it may belong to other organizations). The last owner cannot be removed."""
    owners = _owner_ids_locked(membership.organization_id)
    membership.refresh_from_db(fields=["role"])
    if membership.role == Role.OWNER and owners == [membership.id]:
        raise _last_owner()
    depart(user_id=membership.user_id, organization_id=membership.organization_id)  # its teams
    membership.delete()


def account_memberships_end(user: User) -> None:
    """What a reclaimed account leaves here (``account_reclaim``, apps/accounts/services.py, in its
    transaction): every team and every organization. Registered in apps/organizations/apps.py."""
    depart(user_id=user.pk, organization_id=None)  # every team
    Membership.objects.filter(user=user).delete()


# --- Invitations -----------------------------------------------------------------------------------
# An invitation answers the same whether or not its address has an account on the gateway: the owner
# learns nothing about other organizations' people. The accept link's token is shown once, when the
# invitation is made; only its digest is stored.


def _already_a_member(email: str) -> Conflict:
    return Conflict(
        f"{email} is a member of this organization already.", code="already_a_member", param="email"
    )


@transaction.atomic
def invitation_create(
    *, organization: Organization, data: Mapping, invited_by: User | None = None
) -> tuple[Invitation, str]:
    """Invites the address of ``data`` (inputs.py ``InvitationInputSerializer``: ``email``, and
    ``role``, member by default) to the organization; returns the invitation and the secret token of
    its accept link (``/console/invitations/<token>/``), which is not kept. The address is stored
    normalized and lowercased."""
    values = validated(InvitationInputSerializer, data)
    email, role = User.objects.normalize_email(values["email"]).lower(), values["role"]
    if Membership.objects.filter(organization=organization, user__email__iexact=email).exists():
        raise _already_a_member(email)
    now = timezone.now()
    # An expired invitation is closed, so the address can be invited again.
    Invitation.objects.filter(
        organization=organization, email=email, status=InvitationStatus.PENDING, expires_at__lte=now
    ).update(status=InvitationStatus.EXPIRED, closed_at=now)
    token = secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            invitation = Invitation.objects.create(
                organization=organization,
                email=email,
                role=role,
                invited_by=invited_by,
                token_digest=invitation_token_digest(token),
                expires_at=now + timedelta(days=settings.GATEWAY_INVITATION_TTL_DAYS),
            )
    except IntegrityError:
        raise Conflict(
            f"{email} has a pending invitation already: revoke it to invite again.",
            code="invitation_pending",
            param="email",
        ) from None
    return invitation, token


def _locked_pending(invitation: Invitation) -> Invitation:
    """The invitation locked until the transaction ends, if it can still be answered."""
    invitation = Invitation.objects.select_for_update().select_related("organization").get(pk=invitation.pk)
    if invitation.status != InvitationStatus.PENDING:
        raise Conflict(f"This invitation was {invitation.status} already.", code="invitation_closed")
    if timezone.now() >= invitation.expires_at:
        raise Conflict(
            "This invitation has expired: ask an owner of the organization to invite you again.",
            code="invitation_expired",
        )
    return invitation


def _close(invitation: Invitation, status: str) -> None:
    invitation.status = status
    invitation.closed_at = timezone.now()
    invitation.save(update_fields=["status", "closed_at"])


def _check_invitee(invitation: Invitation, user: User, token: str | None) -> None:
    """``user`` may answer ``invitation``: it is to their address, and either the address is verified
    or they hold the invitation's own link (``token``). An account made through an invitation link
    has proved only that it held that link, which its inviter saw too: it must not answer another
    organization's invitation to the address by its id (docs/security.md, "Squatting an address
    through an invitation link")."""
    holds_the_link = token is not None and constant_time_compare(
        invitation_token_digest(token), invitation.token_digest
    )
    if invitation.email.lower() != (user.email or "").lower() or not (user.email_verified or holds_the_link):
        # Read like an invitation that does not exist: one account never sees another's, and an
        # unverified one learns nothing of the invitations to its address.
        raise NotFound(
            "No such invitation for this account. An account made through an invitation link "
            "answers other invitations through their own links."
            if not user.email_verified
            else "No such invitation for this account."
        )


@transaction.atomic
def invitation_revoke(*, invitation: Invitation) -> Invitation:
    invitation = _locked_pending(invitation)
    _close(invitation, InvitationStatus.REVOKED)
    return invitation


@transaction.atomic
def invitation_accept(*, invitation: Invitation, user: User, token: str | None = None) -> Membership:
    """``user`` (the account with the invited address) joins the organization with the invited role.
    A membership they have already (single sign-on made it meanwhile) keeps its role. ``token``: the
    invitation's link, which an account whose address is not verified needs (``_check_invitee``)."""
    _check_invitee(invitation, user, token)
    invitation = _locked_pending(invitation)
    membership, _ = Membership.objects.get_or_create(
        organization_id=invitation.organization_id, user=user, defaults={"role": invitation.role}
    )
    _close(invitation, InvitationStatus.ACCEPTED)
    return membership


@transaction.atomic
def invitation_decline(*, invitation: Invitation, user: User, token: str | None = None) -> Invitation:
    _check_invitee(invitation, user, token)
    invitation = _locked_pending(invitation)
    _close(invitation, InvitationStatus.DECLINED)
    return invitation


@transaction.atomic
def invitation_sign_up(*, invitation: Invitation, data: Mapping) -> Membership:
    """Someone without an account, holding the accept link, chooses a password (``data``: inputs.py
    ``InvitationSignUpInputSerializer``, which Django's password validators check): the account is made
    with the invited address and accepts the invitation. An address that has an account already signs
    in and accepts instead (``account_exists``): a link never sets the password of an account.

    The account's address is not verified: holding the link proves nothing about the address, since
    the inviter saw the link too (an owner can invite any address and open the link themselves)."""
    invitation = _locked_pending(invitation)
    if User.objects.filter(email__iexact=invitation.email).exists():
        raise Conflict(
            f"{invitation.email} has an account already: sign in with it, then accept the invitation. "
            "If you did not make that account, ask the gateway's operator to reclaim the address "
            "for you (or sign in with single sign-on, where your organization has it).",
            code="account_exists",
        )
    password = validated(InvitationSignUpInputSerializer, data)["password"]
    try:
        validate_password(password, user=User(email=invitation.email))
    except ValidationError as error:
        raise InvalidRequest(
            error.messages[0], code="validation_error", param="password", fields={"password": error.messages}
        ) from None
    user = User.objects.create_user(email=invitation.email, password=password, email_verified=False)
    membership = Membership.objects.create(
        organization_id=invitation.organization_id, user=user, role=invitation.role
    )
    _close(invitation, InvitationStatus.ACCEPTED)
    return membership
