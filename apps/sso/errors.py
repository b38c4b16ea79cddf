from apps.core.errors import Conflict, PermissionDenied


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
