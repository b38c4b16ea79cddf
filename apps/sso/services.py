"""Writes of SSO connections. Nothing on the proxy's path reads them, so unlike the routing
configuration they do not bump the organization's configuration generation."""

import secrets

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.models import User
from apps.accounts.services import account_reclaim
from apps.core.errors import InvalidRequest
from apps.organizations.models import Membership, Organization, Plan

from . import dns
from .addresses import check_issuer
from .errors import DnsUnavailable, DomainNotProved, DomainTaken, PlanRequired, SignInRefused
from .models import DomainVerification, MemberRole, Protocol, SsoConnection, SsoDomain, SsoDomainClaim
from .validation import clean_certificate, clean_domains, clean_entity_id, clean_issuer, clean_sso_url

SECRET_MIN_LENGTH = 8
SECRET_MAX_LENGTH = 4096
PLAN_MESSAGE = "Single sign-on needs the growth or enterprise plan."
# The fields each protocol needs; a connection has those of its protocol only.
PROTOCOL_FIELDS = {
    Protocol.OIDC: ("issuer", "client_id", "client_secret"),
    Protocol.SAML: ("idp_entity_id", "idp_sso_url", "idp_certificate"),
}


def _text(value, *, max_length: int, min_length: int = 1) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("A non-empty string.")
    if not min_length <= len(value) <= max_length:
        raise ValueError(f"Between {min_length} and {max_length} characters.")
    return value


def _clean(values: dict) -> dict:
    """Checks and normalizes the fields in ``values``; a refusal is a 400 naming every bad field
    (and never a secret's value)."""
    rules = {
        "name": lambda v: _text(v, max_length=200).strip(),
        "protocol": lambda v: Protocol(v).value,
        # A refused address is its own 400 (sso_address_refused), raised from here.
        "issuer": lambda v: check_issuer(clean_issuer(_text(v, max_length=500))),
        "client_id": lambda v: _text(v, max_length=500).strip(),
        "client_secret": lambda v: _text(v, min_length=SECRET_MIN_LENGTH, max_length=SECRET_MAX_LENGTH),
        "allowed_domains": lambda v: clean_domains(_strings(v)),
        "idp_entity_id": lambda v: clean_entity_id(_text(v, max_length=1024)),
        "idp_sso_url": lambda v: clean_sso_url(_text(v, max_length=1000)),
        "idp_certificate": lambda v: clean_certificate(_text(v, max_length=16384)),
        "default_role": lambda v: MemberRole(v).value,
        "is_active": _boolean,
        "require_sso": _boolean,
    }
    cleaned, errors = {}, {}
    for field, value in values.items():
        if field not in rules:
            raise TypeError(f"SsoConnection has no field {field!r}")
        try:
            cleaned[field] = rules[field](value)
        except ValueError as error:
            errors[field] = [str(error) if field != "client_secret" else _secret_message()]
    if errors:
        raise InvalidRequest("Invalid input.", code="validation_error", fields=errors)
    return cleaned


def _strings(value) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ValueError("A list of domain names.")
    return list(value)


def _boolean(value) -> bool:
    if not isinstance(value, bool):
        raise ValueError("true or false.")
    return value


def _secret_message() -> str:
    return f"The client secret is a string of {SECRET_MIN_LENGTH} to {SECRET_MAX_LENGTH} characters."


def _check_protocol_fields(protocol: str, given: set[str], *, creating: bool) -> None:
    """A connection takes the fields of its protocol, and when created needs all of them."""
    label = Protocol(protocol).label
    errors = {}
    for other, fields in PROTOCOL_FIELDS.items():
        for field in fields:
            if other != protocol and field in given:
                errors[field] = [f"Not a field of a {label} connection."]
            elif other == protocol and creating and field not in given:
                errors[field] = [f"Required for a {label} connection."]
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
def sso_connection_create(
    *,
    organization: Organization,
    name: str,
    allowed_domains: list[str],
    protocol: str = Protocol.OIDC,
    issuer: str | None = None,
    client_id: str | None = None,
    client_secret: str | None = None,
    idp_entity_id: str | None = None,
    idp_sso_url: str | None = None,
    idp_certificate: str | None = None,
    default_role: str = MemberRole.MEMBER,
    is_active: bool = True,
    require_sso: bool = False,
) -> SsoConnection:
    _require_plan(organization)
    protocol_values = {
        "issuer": issuer,
        "client_id": client_id,
        "client_secret": client_secret,
        "idp_entity_id": idp_entity_id,
        "idp_sso_url": idp_sso_url,
        "idp_certificate": idp_certificate,
    }
    protocol_values = {field: value for field, value in protocol_values.items() if value is not None}
    fields = _clean(
        {
            "name": name,
            "protocol": protocol,
            **protocol_values,
            "allowed_domains": allowed_domains,
            "default_role": default_role,
            "is_active": is_active,
            "require_sso": require_sso,
        }
    )
    _check_protocol_fields(fields["protocol"], set(protocol_values), creating=True)
    secret = fields.pop("client_secret", None)
    connection = SsoConnection(organization=organization, **fields)
    _check_require_sso(connection)
    if secret is not None:
        connection.set_client_secret(secret)
    connection.save()
    _claim_domains(connection)
    return connection


@transaction.atomic
def sso_connection_update(
    *, connection: SsoConnection, client_secret: str | None = None, **changes
) -> SsoConnection:
    """Applies ``changes``; the secret is replaced only when one is given. Activating needs a paid
    plan; deactivating also turns ``require_sso`` off unless the change says otherwise (then 400)."""
    connection = (
        SsoConnection.objects.select_for_update(of=("self",))
        .select_related("organization")
        .get(pk=connection.pk)
    )
    values = dict(changes)
    if client_secret is not None:
        values["client_secret"] = client_secret
    fields = _clean(values)
    if fields.pop("protocol", connection.protocol) != connection.protocol:
        message = "A connection's protocol cannot change: add a new connection."
        raise InvalidRequest(message, code="validation_error", fields={"protocol": [message]})
    _check_protocol_fields(connection.protocol, set(fields), creating=False)
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
