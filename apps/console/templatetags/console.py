from django import template
from django.urls import reverse

from apps.console.areas import SECTIONS
from apps.console.templatetags.console_dash import dollars
from apps.limits.api.serializers import attached_limits

register = template.Library()


@register.filter
def usd(value) -> str:
    """A Decimal as dollars, as every page writes money: "$12.50", "$0.0002", "$0"; empty for None."""
    return dollars(value)


@register.filter
def budget_summary(instance) -> str:
    """A team's, key's or organization's budget in a few words: "$25 monthly", or "—"."""
    limits = attached_limits(instance)
    if limits is None or limits.budget_usd is None:
        return "—"
    return f"{usd(limits.budget_usd)} {limits.budget_period}"


@register.filter
def rate_summary(instance) -> str:
    """ "60 rpm · 10000 tpm", or "—"."""
    limits = attached_limits(instance)
    if limits is None:
        return "—"
    parts = [
        f"{limits.rpm} rpm" if limits.rpm is not None else "",
        f"{limits.tpm} tpm" if limits.tpm is not None else "",
    ]
    return " · ".join(part for part in parts if part) or "—"


@register.filter
def invitation_status(invitation, now) -> str:
    """An invitation's status at ``now`` (a pending one past its date reads expired)."""
    return invitation.current_status(now)


@register.inclusion_tag("console/includes/nav.html", takes_context=True)
def console_navigation(context) -> dict:
    """The side bar's sections, each link with whether the page shown is one of its pages."""
    match = context["request"].resolver_match
    current = match.url_name if match else ""
    return {
        "sections": [
            (
                section.label,
                [
                    (link.label, reverse(link.url_name), current.startswith(link.current_prefix))
                    for link in section.links
                ],
            )
            for section in SECTIONS
        ]
    }
