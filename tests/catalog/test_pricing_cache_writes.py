"""Anthropic's prompt-cache writes cost 1.25 times the input, reads a tenth of it: both priced apart."""

from decimal import Decimal

from django.utils import timezone

from apps.catalog.pricing import Usage, cost_usd, shipped_price


def test_cache_writes_and_reads_are_priced_at_their_own_rates():
    price = shipped_price("anthropic", "claude-sonnet-4-5-20250929", timezone.now())
    # $3 input, $0.30 cache read, $3.75 cache write, $15 output per million tokens.
    usage = Usage(
        input_tokens=1_210_000, output_tokens=0, cached_input_tokens=1_000_000, cache_write_tokens=200_000
    )

    assert price.cache_write == Decimal("3.75")
    assert cost_usd(price, usage) == Decimal("0.03") + Decimal("0.30") + Decimal("0.75")


def test_a_price_without_a_cache_write_rate_prices_writes_as_input():
    price = shipped_price("openai", "gpt-4o-mini", timezone.now())
    written = Usage(input_tokens=1_000_000, cache_write_tokens=1_000_000)

    assert cost_usd(price, written) == cost_usd(price, Usage(input_tokens=1_000_000))
