"""Prices and cost.

A price is in USD per million tokens. The price in force for a request is the organization's own
latest version with ``effective_from`` at or before the request's time, else the shipped table's
(below) for the model or its family (``gpt-4o-2024-08-06`` is priced as ``gpt-4o``). Cost is a
Decimal computed from the usage the upstream reported.
"""

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

MILLION = Decimal(1_000_000)
COST_QUANTUM = Decimal("0.00000001")  # 1e-8 USD: what the cost header shows
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Price:
    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    reasoning: Decimal | None = None
    effective_from: datetime = EPOCH
    source: str = "shipped"


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the upstream reported them (``estimated`` when it did not)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: bool = False


def _p(input_: str, output: str, cached: str | None = None) -> Price:
    return Price(
        input=Decimal(input_), output=Decimal(output), cached_input=Decimal(cached) if cached else None
    )


# Public list prices of well-known models (USD per million tokens). Organizations override them
# with their own dated versions (negotiated prices, Azure rates, self-hosted costs).
SHIPPED_PRICES: dict[tuple[str, str], list[Price]] = {
    ("openai", "gpt-4o"): [_p("2.50", "10.00", "1.25")],
    ("openai", "gpt-4o-mini"): [_p("0.15", "0.60", "0.075")],
    ("openai", "gpt-4.1"): [_p("2.00", "8.00", "0.50")],
    ("openai", "gpt-4.1-mini"): [_p("0.40", "1.60", "0.10")],
    ("openai", "gpt-4.1-nano"): [_p("0.10", "0.40", "0.025")],
    ("openai", "o3-mini"): [_p("1.10", "4.40", "0.55")],
    ("openai", "o4-mini"): [_p("1.10", "4.40", "0.275")],
    ("openai", "text-embedding-3-small"): [_p("0.02", "0")],
    ("openai", "text-embedding-3-large"): [_p("0.13", "0")],
    ("openai", "text-embedding-ada-002"): [_p("0.10", "0")],
    ("anthropic", "claude-3-haiku"): [_p("0.25", "1.25", "0.03")],
    ("anthropic", "claude-3-5-haiku"): [_p("0.80", "4.00", "0.08")],
    ("anthropic", "claude-3-5-sonnet"): [_p("3.00", "15.00", "0.30")],
    ("anthropic", "claude-3-7-sonnet"): [_p("3.00", "15.00", "0.30")],
    ("anthropic", "claude-sonnet-4"): [_p("3.00", "15.00", "0.30")],
    ("anthropic", "claude-opus-4"): [_p("15.00", "75.00", "1.50")],
}
# Azure OpenAI sells OpenAI's models at OpenAI's list prices unless an organization says otherwise.
_PRICE_TABLE_OF = {"azure_openai": "openai"}


def in_force(versions: list[Price], at: datetime) -> Price | None:
    """The latest version effective at ``at``; ``versions`` is sorted newest first."""
    return next((price for price in versions if price.effective_from <= at), None)


def shipped_price(provider: str, model: str, at: datetime) -> Price | None:
    table_provider = _PRICE_TABLE_OF.get(provider, provider)
    candidates = [known for (known_provider, known) in SHIPPED_PRICES if known_provider == table_provider]
    # The longest known name the model starts with: dated snapshots and "-latest" share a price.
    family = max(
        (known for known in candidates if model == known or model.startswith(f"{known}-")),
        key=len,
        default=None,
    )
    if family is None:
        return None
    return in_force(SHIPPED_PRICES[(table_provider, family)], at)


def cost_usd(price: Price | None, usage: Usage) -> Decimal:
    if price is None:
        return Decimal(0)
    cached = min(usage.cached_input_tokens, usage.input_tokens)
    cached_rate = price.cached_input if price.cached_input is not None else price.input
    reasoning_rate = price.reasoning if price.reasoning is not None else price.output
    # Reasoning tokens are part of the output count at OpenAI; charged at their own rate when set.
    reasoning = min(usage.reasoning_tokens, usage.output_tokens) if price.reasoning is not None else 0
    total = (
        (usage.input_tokens - cached) * price.input
        + cached * cached_rate
        + (usage.output_tokens - reasoning) * price.output
        + reasoning * reasoning_rate
    ) / MILLION
    return total.quantize(COST_QUANTUM, rounding=ROUND_HALF_UP)
