"""Prices and cost.

A price is in USD per million tokens. The price in force for a request is the organization's own
latest version with ``effective_from`` at or before the request's time, else the shipped table's
(below) for the model or a dated snapshot of it (``gpt-4o-2024-08-06`` is priced as ``gpt-4o``),
else the organization's default price for unpriced models, if it set one; else the model is
unpriced (None): it costs 0, and a request a budget applies to is refused (apps/proxy/estimates.py).
Cost is a Decimal computed from the usage the upstream reported.
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

MILLION = Decimal(1_000_000)
# Where an organization's default price for unpriced models sits among its price versions (no
# provider is called "*"); a version of it with ``source`` NO_DEFAULT ends the default from then.
DEFAULT_PRICE_KEY = ("*", "*")
NO_DEFAULT = "none"
COST_QUANTUM = Decimal("0.00000001")  # 1e-8 USD: what the cost header shows
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Price:
    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    reasoning: Decimal | None = None
    effective_from: datetime = EPOCH
    # Input written to the provider's prompt cache (Anthropic's cache_creation_input_tokens), per
    # million; None: at the input price.
    cache_write: Decimal | None = None
    source: str = "shipped"  # shipped, organization (its own version), default (for unpriced models)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the upstream reported them (``estimated`` when it did not)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: bool = False
    # Of the input, tokens written to the provider's prompt cache (priced at ``Price.cache_write``).
    cache_write_tokens: int = 0


def _p(
    input_: str, output: str, cached: str | None = None, *, since: datetime = EPOCH, write: str | None = None
) -> Price:
    return Price(
        input=Decimal(input_),
        output=Decimal(output),
        cached_input=Decimal(cached) if cached else None,
        effective_from=since,
        cache_write=Decimal(write) if write else None,
    )


def _claude(input_: str, output: str, cached: str) -> Price:
    """Anthropic's prices: a cache write costs 1.25 times the input (its 5-minute cache; the 1-hour
    cache's 2 times is priced as the 5-minute one)."""
    return _p(input_, output, cached, write=str(Decimal(input_) * Decimal("1.25")))


# Public list prices (USD per million tokens: input, output, cached input) of the providers' standard
# tier, as published on OpenAI's and Anthropic's pricing pages (https://platform.openai.com/docs/pricing,
# https://docs.anthropic.com/en/docs/about-claude/pricing) as of 2025-11-01. Anthropic's cached price is
# its cache-read ("cache hit") price, and a cache write costs 1.25 times the input (its 5-minute
# cache; the 1-hour one's 2 times is not modelled, nor are batch, priority and long-context tiers).
# Organizations override any of them with their own dated versions (negotiated prices, Azure rates,
# self-hosted costs: POST /api/v1/model-prices; their cache writes at their input price);
# docs/budgets.md says how.
# A version with ``since`` starts then: a price cut does not re-price the requests made before it.
SHIPPED_PRICES: dict[tuple[str, str], list[Price]] = {
    # GPT-5 family
    ("openai", "gpt-5"): [_p("1.25", "10.00", "0.125")],
    ("openai", "gpt-5-mini"): [_p("0.25", "2.00", "0.025")],
    ("openai", "gpt-5-nano"): [_p("0.05", "0.40", "0.005")],
    ("openai", "gpt-5-chat-latest"): [_p("1.25", "10.00", "0.125")],
    ("openai", "gpt-5-codex"): [_p("1.25", "10.00", "0.125")],
    ("openai", "gpt-5-pro"): [_p("15.00", "120.00")],
    # GPT-4.x
    ("openai", "gpt-4.1"): [_p("2.00", "8.00", "0.50")],
    ("openai", "gpt-4.1-mini"): [_p("0.40", "1.60", "0.10")],
    ("openai", "gpt-4.1-nano"): [_p("0.10", "0.40", "0.025")],
    ("openai", "gpt-4.5-preview"): [_p("75.00", "150.00", "37.50")],
    ("openai", "gpt-4o"): [_p("2.50", "10.00", "1.25")],
    ("openai", "gpt-4o-2024-05-13"): [_p("5.00", "15.00")],  # the first gpt-4o snapshot kept its price
    ("openai", "gpt-4o-mini"): [_p("0.15", "0.60", "0.075")],
    ("openai", "chatgpt-4o-latest"): [_p("5.00", "15.00")],
    ("openai", "gpt-4-turbo"): [_p("10.00", "30.00")],
    ("openai", "gpt-4"): [_p("30.00", "60.00")],
    ("openai", "gpt-3.5-turbo"): [_p("0.50", "1.50")],
    # o-series (reasoning tokens are billed as output tokens)
    ("openai", "o1"): [_p("15.00", "60.00", "7.50")],
    ("openai", "o1-preview"): [_p("15.00", "60.00", "7.50")],
    ("openai", "o1-mini"): [_p("1.10", "4.40", "0.55")],
    ("openai", "o1-pro"): [_p("150.00", "600.00")],
    ("openai", "o3"): [
        _p("2.00", "8.00", "0.50", since=datetime(2025, 6, 10, tzinfo=UTC)),  # OpenAI's price cut
        _p("10.00", "40.00", "2.50"),
    ],
    ("openai", "o3-pro"): [_p("20.00", "80.00")],
    ("openai", "o3-mini"): [_p("1.10", "4.40", "0.55")],
    ("openai", "o3-deep-research"): [_p("10.00", "40.00", "2.50")],
    ("openai", "o4-mini"): [_p("1.10", "4.40", "0.275")],
    ("openai", "o4-mini-deep-research"): [_p("2.00", "8.00", "0.50")],
    ("openai", "codex-mini-latest"): [_p("1.50", "6.00", "0.375")],
    # Embeddings (no output tokens)
    ("openai", "text-embedding-3-small"): [_p("0.02", "0")],
    ("openai", "text-embedding-3-large"): [_p("0.13", "0")],
    ("openai", "text-embedding-ada-002"): [_p("0.10", "0")],
    # Claude (API ids: the dated ones, e.g. claude-sonnet-4-20250514, are priced as their family)
    ("anthropic", "claude-opus-4-1"): [_claude("15.00", "75.00", "1.50")],
    ("anthropic", "claude-opus-4"): [_claude("15.00", "75.00", "1.50")],
    ("anthropic", "claude-opus-4-0"): [_claude("15.00", "75.00", "1.50")],
    ("anthropic", "claude-sonnet-4-5"): [_claude("3.00", "15.00", "0.30")],
    ("anthropic", "claude-sonnet-4"): [_claude("3.00", "15.00", "0.30")],
    ("anthropic", "claude-sonnet-4-0"): [_claude("3.00", "15.00", "0.30")],
    ("anthropic", "claude-haiku-4-5"): [_claude("1.00", "5.00", "0.10")],
    ("anthropic", "claude-3-7-sonnet"): [_claude("3.00", "15.00", "0.30")],
    ("anthropic", "claude-3-5-sonnet"): [_claude("3.00", "15.00", "0.30")],
    ("anthropic", "claude-3-5-haiku"): [_claude("0.80", "4.00", "0.08")],
    ("anthropic", "claude-3-opus"): [_claude("15.00", "75.00", "1.50")],
    ("anthropic", "claude-3-haiku"): [_claude("0.25", "1.25", "0.03")],
}
# Azure OpenAI sells OpenAI's models at OpenAI's list prices unless an organization says otherwise.
_PRICE_TABLE_OF = {"azure_openai": "openai"}
# What may follow a known name and still be the same model at the same price: a dated snapshot
# (gpt-4o-2024-08-06, claude-3-5-sonnet-20241022, gpt-4-0613, Vertex's claude-...@20241022) or
# "-latest". Nothing else: o3-deep-research is not o3, gpt-5-pro is not gpt-5, and a variant the table
# does not know must read as unpriced (refused where a budget applies) rather than priced too low.
_SNAPSHOT_SUFFIX = re.compile(r"(?:-\d{4}-\d{2}-\d{2}|-\d{8}|-\d{4}|@\d{8}|-latest)")


def in_force(versions: list[Price], at: datetime) -> Price | None:
    """The latest version effective at ``at``; ``versions`` is sorted newest first."""
    return next((price for price in versions if price.effective_from <= at), None)


def shipped_price(provider: str, model: str, at: datetime) -> Price | None:
    table_provider = _PRICE_TABLE_OF.get(provider, provider)
    family = _family(table_provider, model)
    if family is None:
        return None
    return in_force(SHIPPED_PRICES[(table_provider, family)], at)


def _family(provider: str, model: str) -> str | None:
    """The known name ``model`` is, or is a dated snapshot (or "-latest") of."""
    if (provider, model) in SHIPPED_PRICES:
        return model
    candidates = [
        known
        for (known_provider, known) in SHIPPED_PRICES
        if known_provider == provider and is_snapshot_of(model, known)
    ]
    return max(candidates, key=len, default=None)


def is_snapshot_of(model: str, known: str) -> bool:
    """``model`` is ``known`` or a dated snapshot (or "-latest") of it: the one rule of when two names
    are the same model, for prices here and for policies' model scopes and denied models
    (apps/policies/engine.py)."""
    return model == known or (
        model.startswith(known) and _SNAPSHOT_SUFFIX.fullmatch(model, len(known)) is not None
    )


def cost_usd(price: Price | None, usage: Usage) -> Decimal:
    if price is None:
        return Decimal(0)
    cached = min(usage.cached_input_tokens, usage.input_tokens)
    cached_rate = price.cached_input if price.cached_input is not None else price.input
    reasoning_rate = price.reasoning if price.reasoning is not None else price.output
    # Reasoning tokens are part of the output count at OpenAI; charged at their own rate when set.
    reasoning = min(usage.reasoning_tokens, usage.output_tokens) if price.reasoning is not None else 0
    written = min(usage.cache_write_tokens, usage.input_tokens - cached)
    write_rate = price.cache_write if price.cache_write is not None else price.input
    total = (
        (usage.input_tokens - cached - written) * price.input
        + cached * cached_rate
        + written * write_rate
        + (usage.output_tokens - reasoning) * price.output
        + reasoning * reasoning_rate
    ) / MILLION
    return total.quantize(COST_QUANTUM, rounding=ROUND_HALF_UP)
