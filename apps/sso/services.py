"""Writes of SSO connections. Nothing on the proxy's path reads them, so unlike the routing
configuration they do not bump the organization's configuration generation. A connection's input is
checked here (``sso_connection_check``: its types and shapes parsed by inputs.py, then the issuer's
address), for the API, the admin and the console alike."""

import secrets
from collections.abc import Mapping

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.models import User
from apps.accounts.services import account_reclaim
from apps.core.api.serializers import validated
from apps.core.errors import InvalidRequest
from apps.organizations.models import Membership, Organization, Plan

from . import dns
from .addresses import check_issuer
from .errors import DnsUnavailable, DomainNotProved, DomainTaken, PlanRequired, SignInRefused
from .inputs import PROTOCOL_FIELDS, SsoConnectionInputSerializer
from .models import DomainVerification, MemberRole, Protocol, SsoConnection, SsoDomain, SsoDomainClaim

PLAN_MESSAGE = "Single sign-on needs the growth or enterprise plan."


def sso_connection_check(*, data: Mapping, partial: bool = False) -> dict:
    """``data`` (the API's body, inputs.py ``SsoConnectionInputSerializer``: the fields of one
    protocol, all of them for a new connection; ``partial``: a PATCH's, only the fields it names) as
    a connection stores it: the issuer's address allowed (its own 400, sso_address_refused), the
    domains lowercased, sorted and each once. The admin's form runs it before saving, so its page
    shows a refusal on its field."""
    values = dict(validated(SsoConnectionInputSerializer, data, partial=partial))
    if "issuer" in values:
        values["issuer"] = check_issuer(values["issuer"])
    if "allowed_domains" in values:
        values["allowed_domains"] = sorted(set(values["allowed_domains"]))
    return values


def _check_protocol_fields(protocol: str, given: set[str]) -> None:
    """A change takes the fields of the stored connection's protocol only."""
    label = Protocol(protocol).label
    errors = {
        field: [f"Not a field of a {label} connection."]
        for other, fields in PROTOCOL_FIELDS.items()
        if other != protocol
        for field in fields
        if field in given
    }
    if errors:
        raise InvalidRequest("Invalid input.", code="validation_error", fields=errors)


def _require_plan(organization: Organization) -> None:
    if organization.plan == Plan.FREE:
        raise PlanRequired(PLAN_MESSAGE)


def _check_require_sso(connection: SsoConnection) -> None:
    if connection.require_sso and not connection.is_active:
        message = "Only an active connection can require single sign-on."
        raise InvalidRequest(message, code="validation_error", fields={"require_sso": [message]})


def _claim_domains(connection: SsoConnection) -> None:
    """Makes the claims match the connection: its domains while it is active, none otherwise.

    Within the organization a domain belongs to one active connection (so sign-in knows which one);
    across organizations only a domain another organization has *proved* is refused here: an
    unproved claim routes and refuses nothing, so it cannot squat a domain against its owner."""
    SsoDomainClaim.objects.filter(connection=connection).delete()
    _keep_domain_rows(connection.organization_id)
    if not connection.is_active:
        return
    domains = connection.allowed_domains
    taken = set(
        SsoDomainClaim.objects.filter(
            organization_id=connection.organization_id, domain__in=domains
        ).values_list("domain", flat=True)
    ) | set(
        SsoDomain.objects.filter(domain__in=domains, verified_at__isnull=False)
        .exclude(organization_id=connection.organization_id)
        .values_list("domain", flat=True)
    )
    if taken:
        raise _taken(sorted(taken))
    try:
        with transaction.atomic():
            SsoDomainClaim.objects.bulk_create(
                SsoDomainClaim(
                    domain=domain, connection=connection, organization_id=connection.organization_id
                )
                for domain in domains
            )
    except IntegrityError:  # claimed by a concurrent write since the check above
        raise _taken(domains) from None


def _keep_domain_rows(organization_id) -> None:
    """One ``SsoDomain`` per domain the organization's connections name (a new one pending, with its
    token); a domain none of them names any more is released, its proof with it."""
    named = set()
    for domains in SsoConnection.objects.filter(organization_id=organization_id).values_list(
        "allowed_domains", flat=True
    ):
        named.update(domains)
    SsoDomain.objects.filter(organization_id=organization_id).exclude(domain__in=named).delete()
    existing = set(SsoDomain.objects.filter(organization_id=organization_id).values_list("domain", flat=True))
    SsoDomain.objects.bulk_create(
        SsoDomain(organization_id=organization_id, domain=domain, token=secrets.token_urlsafe(24))
        for domain in sorted(named - existing)
    )


def _taken(domains: list[str]) -> DomainTaken:
    message = (
        f"Already used by another active single sign-on connection of this organization, or proved by "
        f"another organization: {', '.join(domains)}. A domain signs in through one connection."
    )
    return DomainTaken(message, fields={"allowed_domains": [message]})


@transaction.atomic
def sso_connection_create(*, organization: Organization, data: Mapping) -> SsoConnection:
    """A new connection from ``data`` (the API's body, ``sso_connection_check``): OpenID Connect
    unless ``protocol`` says saml, its members added as ``member`` unless ``default_role`` says
    otherwise, active unless ``is_active`` is false. Needs a paid plan."""
    checked = sso_connection_check(data=data)
    _require_plan(organization)
    fields = {
        "protocol": Protocol.OIDC.value,
        "default_role": MemberRole.MEMBER.value,
        "is_active": True,
        "require_sso": False,
        **checked,
    }
    secret = fields.pop("client_secret", None)
    connection = SsoConnection(organization=organization, **fields)
    _check_require_sso(connection)
    if secret is not None:
        connection.set_client_secret(secret)
    connection.save()
    _claim_domains(connection)
    return connection


@transaction.atomic
def sso_connection_update(*, connection: SsoConnection, data: Mapping) -> SsoConnection:
    """Applies ``data`` (any of the fields, as the API's PATCH body has them; those of the stored
    connection's protocol only); the secret is replaced only when one is given. Activating needs a
    paid plan; deactivating also turns ``require_sso`` off unless the change says otherwise (then
    400)."""
    connection = (
        SsoConnection.objects.select_for_update(of=("self",))
        .select_related("organization")
        .get(pk=connection.pk)
    )
    fields = sso_connection_check(data=data, partial=True)
    if fields.pop("protocol", connection.protocol) != connection.protocol:
        message = "A connection's protocol cannot change: add a new connection."
        raise InvalidRequest(message, code="validation_error", fields={"protocol": [message]})
    _check_protocol_fields(connection.protocol, set(fields))
    if fields.get("is_active") and not connection.is_active:
        _require_plan(connection.organization)
    if fields.get("is_active") is False and "require_sso" not in fields:
        fields["require_sso"] = False
    secret = fields.pop("client_secret", None)
    for field, value in fields.items():
        setattr(connection, field, value)
    _check_require_sso(connection)
    if secret is not None:
        connection.set_client_secret(secret)
    connection.save()
    if {"is_active", "allowed_domains"} & set(fields):
        _claim_domains(connection)
    return connection


@transaction.atomic
def sso_connection_delete(*, connection: SsoConnection) -> None:
    organization_id = connection.organization_id
    connection.delete()  # its domain claims go with it
    _keep_domain_rows(organization_id)


# --- Proving a domain ------------------------------------------------------------------------------
# A domain routes "Sign in with SSO" to an organization, and its ``require_sso`` refuses passwords,
# only once the organization has proved it: a DNS TXT record the owner publishes (checked when they
# ask), or an operator's approval in the Django admin. One organization at most holds it proved.


def _mark_verified(sso_domain: SsoDomain, *, method: str, approved_by: str = "") -> SsoDomain:
    sso_domain.verified_at = timezone.now()
    sso_domain.verified_by = method
    sso_domain.approved_by = approved_by
    try:
        with transaction.atomic():
            sso_domain.save(update_fields=["verified_at", "verified_by", "approved_by"])
    except IntegrityError:  # proved by another organization (the partial unique index says so)
        raise DomainTaken(
            f"{sso_domain.domain} is proved by another organization already. Ask the gateway's operator "
            "if it is yours."
        ) from None
    return sso_domain


def sso_domain_verify_dns(*, sso_domain: SsoDomain) -> SsoDomain:
    """Checks the domain's TXT record now and marks it proved when the record holds its token."""
    if sso_domain.is_verified:
        return sso_domain
    try:
        present = dns.txt_record_present(domain=sso_domain.domain, token=sso_domain.token)
    except dns.DnsUnavailable:
        raise DnsUnavailable(
            "No DNS resolver answered in time; try again later, or ask the gateway's operator."
        ) from None
    if not present:
        raise DomainNotProved(
            f"No TXT record {dns.challenge_name(sso_domain.domain)} with the value "
            f"{dns.challenge_value(sso_domain.token)} was found. Publish it and check again (DNS changes "
            "can take a while to reach every resolver)."
        )
    return _mark_verified(sso_domain, method=DomainVerification.DNS)


def sso_domain_approve(*, sso_domain: SsoDomain, approved_by: str) -> SsoDomain:
    """An operator's approval (Django admin): the organization owns the domain, checked some other
    way. ``approved_by`` names the operator in the record."""
    if sso_domain.is_verified:
        return sso_domain
    return _mark_verified(sso_domain, method=DomainVerification.OPERATOR, approved_by=approved_by)


def sso_domain_withdraw(*, sso_domain: SsoDomain) -> SsoDomain:
    """Takes the proof back (Django admin): the domain routes and refuses nothing again until proved."""
    sso_domain.verified_at = None
    sso_domain.verified_by = ""
    sso_domain.approved_by = ""
    sso_domain.save(update_fields=["verified_at", "verified_by", "approved_by"])
    return sso_domain


@transaction.atomic
def sso_member_sign_in(*, connection: SsoConnection, email: str) -> Membership:
    """The membership a single sign-on through ``connection`` signs in to, made just in time: an
    account for ``email`` (with an unusable password) if there is none, and a membership in the
    connection's organization with its ``default_role`` if there is none. An existing membership
    keeps its role. The caller has checked the email (verified, of an allowed domain).

    An account that exists already is signed in only if it is a member of the connection's
    organization and not the gateway's staff: a domain claim proves nothing about who owns the domain,
    so one organization's identity provider must never vouch for an account another organization (or
    the Django admin) trusts. An owner adds such a person to the organization first.

    Except an account whose address was never proved (made through an invitation link, which whoever
    held the link could open, its inviter included): the identity provider of a domain its
    organization proved is the proof, so the account is reclaimed for the person signing in
    (``account_reclaim``: its password, two-factor and sessions end, it leaves every organization)
    and joins this one. Otherwise whoever opened the first link to an address would keep its owner
    out of the gateway for good. An unverified account that is a member of the connection's
    organization already is signed in as it is (its password stays: that organization's own link
    made it a member)."""
    email = User.objects.normalize_email(email.strip()).lower()
    user = User.objects.select_for_update().filter(email__iexact=email).first()
    if user is not None:
        if user.is_staff or user.is_superuser:
            raise SignInRefused(
                "This account belongs to the gateway's staff: it signs in with its password, never "
                "through an organization's identity provider."
            )
        if not Membership.objects.filter(organization_id=connection.organization_id, user=user).exists():
            if user.email_verified:
                raise SignInRefused(
                    f"{email} already has an account that is not a member of "
                    f"{connection.organization.name}. Ask an owner of the organization to add it; "
                    "single sign-on then signs it in."
                )
            user = account_reclaim(user=user)
    if user is None:
        try:
            with transaction.atomic():
                # The identity provider of a proved domain vouches for the address.
                user = User.objects.create_user(email=email, password=None, email_verified=True)
        except IntegrityError:  # made by a concurrent sign-in since the look-up
            user = User.objects.get(email__iexact=email)
    membership = Membership.objects.filter(organization_id=connection.organization_id, user=user).first()
    if membership is not None:
        return membership
    try:
        with transaction.atomic():
            return Membership.objects.create(
                organization_id=connection.organization_id, user=user, role=connection.default_role
            )
    except IntegrityError:
        return Membership.objects.get(organization_id=connection.organization_id, user=user)
