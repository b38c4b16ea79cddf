"""The gateway's stages: the one place a feature adds its stage (``register`` at the bottom puts
each at its slot, ``pipeline.SLOTS``). Loaded once when Django starts (``apps.py``)."""

from dataclasses import replace
from typing import Any

from apps.catalog.pricing import Usage, cost_usd

from .answers import Answer, StreamOutcome
from .caching import ServeFromCache
from .conversing import ContinueConversation
from .estimates import text_chars
from .pipeline import ProxyContext, Stage, register
from .policing import ApplyPolicies


class SettleCost(Stage):
    """The answer's cost at the organization's price in force when the request arrived (what
    reconcile recomputes it with). In the innermost slot: an answer no upstream gave costs nothing."""

    slot = "cost"
    endpoints = frozenset({"chat.completions", "embeddings", "responses", "messages"})

    async def after(self, ctx: ProxyContext, answer: Answer) -> None:
        settle_cost(ctx, answer.usage)

    async def on_stream_end(self, ctx: ProxyContext, outcome: StreamOutcome) -> None:
        usage = outcome.usage
        if usage is None:
            usage = estimate_usage(ctx.body, outcome.output_chars)
        elif not outcome.completed:
            # Cut before the upstream's last count (Anthropic's comes at the end): what was delivered
            # is billed at least, from the text sent.
            delivered = -(-outcome.output_chars // 4)
            if delivered > usage.output_tokens:
                usage = replace(usage, output_tokens=delivered, estimated=True)
        settle_cost(ctx, usage)


def settle_cost(ctx: ProxyContext, usage: Usage | None) -> None:
    record = ctx.record
    record.usage = usage
    if usage is None or record.provider is None or record.model is None:
        return
    price = ctx.config.price(record.provider, record.model, record.started_at)
    record.cost_usd = cost_usd(price, usage)
    # Said in the audit entry: a cost of 0 for want of a price (no budget applied, or the request
    # would have been refused) must not read as a free model, nor a default price as a list price.
    record.price_source = price.source if price is not None else "unpriced"


def estimate_usage(body: dict[str, Any], output_chars: int) -> Usage:
    """About four characters a token: for upstreams that report no usage, marked estimated."""
    if "messages" in body:
        prompt_chars = sum(len(str(message.get("content") or "")) for message in body["messages"])
    else:  # a Responses request
        prompt_chars = text_chars([body.get("instructions"), body.get("input")])
    return Usage(input_tokens=-(-prompt_chars // 4), output_tokens=-(-output_chars // 4), estimated=True)


register(ContinueConversation())
register(ApplyPolicies())
register(ServeFromCache())
register(SettleCost())
