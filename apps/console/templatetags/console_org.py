"""Filters of the provider-key, catalog, team and organization pages."""

from django import template

from apps.audit.breaker_history import BreakerState, KeyHealth

register = template.Library()

BREAKER_LABELS = {
    BreakerState.CLOSED: "closed",
    BreakerState.OPEN: "open: cooling down",
    BreakerState.HALF_OPEN: "half-open: on trial",
}


@register.filter
def breaker_state(health: KeyHealth | None) -> str:
    """The state's CSS word (``closed``, ``open``, ``half_open``); closed for a key with no recent attempt."""
    return str(health.state) if health is not None else str(BreakerState.CLOSED)


@register.filter
def breaker_label(health: KeyHealth | None) -> str:
    if health is None:
        return "closed (no recent attempts)"
    return BREAKER_LABELS[health.state]


@register.filter
def labels_or(values, fallback: str) -> str:
    """A list of labels joined by spaces, or ``fallback`` when it is empty."""
    return " ".join(values) if values else fallback


@register.filter
def inherited(value, fallback: str):
    """A team's own setting, or what it inherits: None reads as ``fallback``."""
    if value is None:
        return fallback
    if value is True:
        return "on"
    if value is False:
        return "off"
    return value


@register.filter
def price(value) -> str:
    """USD per million tokens without trailing zeros ("0.15"); "—" for none."""
    if value is None or value == "":
        return "—"
    return f"${value.normalize():f}"
