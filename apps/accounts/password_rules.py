"""What may refuse a password sign-in, registered by the app that owns the rule.

Single sign-on (apps/sso/policy.py) refuses the password sessions of an organization that requires it.
Accounts cannot import it (sso builds on accounts), so sso registers its rule in its
``AppConfig.ready``, which every process runs::

    password_rules.register(refusals=password_refusals, sign_in_refusal=password_sign_in_refusal)

A rule answers two questions, both asked only once the password is right (a refusal tells a guesser
nothing): ``refusals``, the organizations (ids as strings) whose sessions the password may not open,
each with the reason to show (the API's login, apps/organizations/member_sessions.py); and
``sign_in_refusal``, the reason the password opens no session at all, or None (the console's login
form, apps/accounts/forms.py).
"""

from collections.abc import Callable
from dataclasses import dataclass

from .models import User


@dataclass(frozen=True, slots=True)
class PasswordRule:
    refusals: Callable[[User], dict[str, str]]
    sign_in_refusal: Callable[[User], str | None]


rules: list[PasswordRule] = []


def register(
    *, refusals: Callable[[User], dict[str, str]], sign_in_refusal: Callable[[User], str | None]
) -> None:
    rule = PasswordRule(refusals=refusals, sign_in_refusal=sign_in_refusal)
    if rule not in rules:  # ready() may run more than once in a test process
        rules.append(rule)


def password_refusals(user: User) -> dict[str, str]:
    """Every rule's refusals, by organization id; empty when the password opens every session."""
    refused: dict[str, str] = {}
    for rule in rules:
        for organization_id, reason in rule.refusals(user).items():
            refused.setdefault(organization_id, reason)
    return refused


def password_sign_in_refusal(user: User) -> str | None:
    """The first rule's reason why the password opens no session of ``user`` at all, or None."""
    for rule in rules:
        reason = rule.sign_in_refusal(user)
        if reason:
            return reason
    return None
