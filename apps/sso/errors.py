from apps.core.errors import Conflict, InvalidRequest, PermissionDenied, ServiceUnavailable


class PlanRequired(PermissionDenied):
    """Single sign-on needs the growth or enterprise plan."""

    code = "plan_required"


class DomainTaken(Conflict):
    """An email domain already belongs to another active connection (of any organization: sign-in
    finds the connection by the domain). The other connection is never named."""

    code = "sso_domain_taken"


class SignInRefused(PermissionDenied):
    """A single sign-on that may not sign this account in (the message says why)."""

    code = "sso_sign_in_refused"


class DomainNotProved(InvalidRequest):
    """The domain's TXT record was not found (or holds another value)."""

    code = "sso_domain_not_proved"


class DnsUnavailable(ServiceUnavailable):
    """No DNS resolver answered the domain's check in time."""

    code = "sso_dns_unavailable"
