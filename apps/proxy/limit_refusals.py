"""What a refused request is told: admission's errors, their texts and headers (OpenAI's
``x-ratelimit-*``), and the budget events a refusal or a settle raises."""

import logging
import math

from apps.core.errors import GatewayError, RateLimited
from apps.events.publish import EventType, raise_event
from apps.limits.counters import BudgetCharge, RateState
from apps.limits.models import Scope
from apps.limits.selectors import nanos_to_usd
from apps.observability import metrics

logger = logging.getLogger(__name__)


class BudgetExceeded(GatewayError):
    status = 402
    type = "insufficient_quota"
    code = "budget_exceeded"


class LimitsUnavailable(GatewayError):
    status = 503
    type = "service_unavailable_error"
    code = "limits_unavailable"


_SCOPE_NAMES: dict[str, str] = {
    Scope.API_KEY: "API key",
    Scope.TEAM: "team",
    Scope.ORGANIZATION: "organization",
}


def rate_limited(state: RateState) -> GatewayError:
    charge = state.charge
    metrics.rate_limit_refused(charge.scope)
    unit = "requests" if charge.kind == "requests" else "tokens"
    owner = _SCOPE_NAMES[charge.scope]
    headers = rate_limit_headers([state])
    if charge.limit == 0:
        message = f"The {owner}'s rate limit is 0 {unit} per minute: every request is refused."
        headers.update({"retry-after": "60", "x-should-retry": "false"})
    elif state.retry_after_ms < 0:
        message = (
            f"Request too large for the {owner}'s limit of {charge.limit} {unit} per minute "
            f"(this request counts {charge.cost})."
        )
        headers["x-should-retry"] = "false"
    else:
        seconds = max(1, math.ceil(state.retry_after_ms / 1000))
        message = (
            f"Rate limit of the {owner} reached: {charge.limit} {unit} per minute. Retry in {seconds} s."
        )
        headers["retry-after"] = str(seconds)
    return RateLimited(message, headers=headers)


def budget_exceeded(
    organization_id: str, request_id: str, charge: BudgetCharge, *, first_refusal: bool
) -> GatewayError:
    owner = _SCOPE_NAMES[charge.scope]
    metrics.budget_refused(charge.scope)
    if first_refusal:
        announce(
            organization_id,
            EventType.BUDGET_EXCEEDED,
            charge,
            {"refused_request_id": request_id},
        )
    return BudgetExceeded(
        f"The {owner}'s budget of {nanos_to_usd(charge.limit_nanos).normalize():f} USD for "
        f"{charge.window.start:%Y-%m-%dT%H:%M:%SZ} to {charge.window.end:%Y-%m-%dT%H:%M:%SZ} has no room "
        f"for this request, which could cost up to {nanos_to_usd(charge.reserve_nanos).normalize():f} USD."
    )


def announce(organization_id: str, event_type: str, charge: BudgetCharge, extra: dict) -> None:
    try:
        raise_event(
            organization_id,
            event_type,
            {
                "scope": charge.scope,
                "scope_id": charge.scope_id,
                "period_start": charge.window.start.isoformat().replace("+00:00", "Z"),
                "period_end": charge.window.end.isoformat().replace("+00:00", "Z"),
                "budget_usd": f"{nanos_to_usd(charge.limit_nanos):f}",
                **extra,
            },
        )
    except Exception:  # an event never fails a request
        logger.exception("Could not raise the %s event", event_type)


# --- Headers -------------------------------------------------------------------------------------------


def rate_limit_headers(states: list[RateState]) -> dict[str, str]:
    """OpenAI's x-ratelimit-* headers for the most restrictive limit of each kind (the one with the
    least left)."""
    headers: dict[str, str] = {}
    for kind in ("requests", "tokens"):
        of_kind = [state for state in states if state.charge.kind == kind]
        if not of_kind:
            continue
        tightest = min(of_kind, key=lambda state: (state.remaining, -state.reset_ms))
        headers[f"x-ratelimit-limit-{kind}"] = str(tightest.charge.limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, tightest.remaining))
        headers[f"x-ratelimit-reset-{kind}"] = duration(tightest.reset_ms)
    return headers


def duration(milliseconds: int) -> str:
    """OpenAI's format: 20ms, 1s, 1.5s, 6m0s."""
    if milliseconds < 1000:
        return f"{max(0, milliseconds)}ms"
    seconds = milliseconds / 1000
    if seconds < 60:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3f}".rstrip("0").rstrip(".") + "s"
