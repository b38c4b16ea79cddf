"""What a request can cost at most, before it is sent: the budget reservation and the tokens a
tokens-per-minute limit counts (docs/budgets.md).

A token is at least one byte of the text it encodes (byte-level BPE: OpenAI's and Anthropic's
tokenizers), so the UTF-8 size of everything the model reads bounds its input tokens. Images and
audio are counted at a fixed allowance each. The output is bounded by ``max_completion_tokens`` or
``max_tokens`` times ``n``; without them by ``GATEWAY_BUDGET_DEFAULT_MAX_TOKENS``, which is not a
bound (the reservation may then fall short: the overshoot docs/budgets.md works out).
"""

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings

from apps.catalog.pricing import Usage, cost_usd
from apps.core.errors import InvalidRequest

from .config import OrganizationConfig
from .routing import resolve_model

# Per message: its role, name and the delimiters around it (OpenAI counts 3 to 4 tokens).
MESSAGE_OVERHEAD_TOKENS = 8
# An image or audio part, whatever its size: a 2048 x 2048 image at high detail is 1,105 tokens at OpenAI.
MEDIA_PART_TOKENS = 2_000
MEDIA_TYPES = frozenset(
    {"image_url", "input_audio", "image", "file", "input_image", "input_file", "document"}
)
NANOS_PER_USD = Decimal(10**9)


@dataclass(frozen=True, slots=True)
class Estimate:
    input_bound: int  # at least the input tokens
    output_bound: int  # at least the output tokens when the client set a maximum
    output_is_bounded: bool
    # What a tokens-per-minute limit counts up front (OpenAI's way: about 4 characters a token,
    # plus the maximum output asked for); corrected by the real count after the answer.
    rate_tokens: int


def estimate(endpoint_name: str, body: dict[str, Any]) -> Estimate:
    if endpoint_name == "embeddings":
        input_bytes, chars, media = _input_size(body.get("input"))
        return Estimate(input_bytes, 0, True, -(-chars // 4) + media)
    if endpoint_name == "responses":
        return _responses_estimate(body)
    if endpoint_name == "messages":
        return _messages_estimate(body)
    input_bytes, chars, media = 0, 0, 0
    for message in body.get("messages") or ():
        size, message_chars, message_media = _input_size(message)
        input_bytes += size + MESSAGE_OVERHEAD_TOKENS
        chars += message_chars
        media += message_media
    for name in ("tools", "functions", "response_format", "system"):  # system: the Messages API's
        if body.get(name) is not None:
            size = len(json.dumps(body[name], ensure_ascii=False).encode())
            input_bytes, chars = input_bytes + size, chars + size
    requested = body.get("max_completion_tokens") or body.get("max_tokens")
    choices = body.get("n") or 1
    output = (requested or settings.GATEWAY_BUDGET_DEFAULT_MAX_TOKENS) * choices
    return Estimate(
        input_bound=input_bytes + media,
        output_bound=output,
        output_is_bounded=requested is not None,
        rate_tokens=-(-chars // 4) + media + (requested or 0) * choices,
    )


def _responses_estimate(body: dict[str, Any]) -> Estimate:
    """A Responses request reads its instructions, input items, tools and text format; its output is
    bounded by ``max_output_tokens``. Earlier turns a ``previous_response_id`` brings are not in the
    body: what they add is corrected by the real count after the answer."""
    items = body.get("input")
    input_bytes, chars, media = _input_size(
        [body.get("instructions"), items, body.get("tools"), body.get("text")]
    )
    if isinstance(items, list):
        input_bytes += MESSAGE_OVERHEAD_TOKENS * len(items)
    requested = body.get("max_output_tokens")
    output = requested or settings.GATEWAY_BUDGET_DEFAULT_MAX_TOKENS
    return Estimate(
        input_bound=input_bytes + media,
        output_bound=output,
        output_is_bounded=requested is not None,
        rate_tokens=-(-chars // 4) + media + (requested or 0),
    )


def _messages_estimate(body: dict[str, Any]) -> Estimate:
    """A Messages request reads its system prompt, its turns and its tools; one answer, bounded by
    ``max_tokens`` (validated: a positive integer)."""
    turns = body.get("messages")
    input_bytes, chars, media = _input_size([body.get("system"), turns, body.get("tools")])
    if isinstance(turns, list):
        input_bytes += MESSAGE_OVERHEAD_TOKENS * len(turns)
    output = body["max_tokens"]
    return Estimate(
        input_bound=input_bytes + media,
        output_bound=output,
        output_is_bounded=True,
        rate_tokens=-(-chars // 4) + media + output,
    )


def text_chars(value: Any) -> int:
    """The characters of the text in ``value``, at any depth (media parts aside)."""
    return _input_size(value)[1]


def _input_size(value: Any) -> tuple[int, int, int]:
    """UTF-8 bytes and characters of the text in ``value``, and the allowance for its media parts.
    Walked with a stack of its own: a body may nest as deep as the JSON parser allowed."""
    size = chars = media = 0
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            size, chars = size + len(item.encode()), chars + len(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            size, chars = size + 1, chars + 4  # a token id, as embeddings take them: one token
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            if item.get("type") in MEDIA_TYPES:
                media += MEDIA_PART_TOKENS
            else:
                pending.extend(part for key, part in item.items() if key != "role")
    return size, chars, media


class ModelNotPriced(InvalidRequest):
    code = "model_not_priced"


def max_cost_nanos(config: OrganizationConfig, model: str, bound: Estimate, at) -> int:
    """The most the request can cost: its bounds priced at the dearest deployment the route may use
    (failover may reach any of them), at the prices in force when it arrived.

    Called only when a budget applies. A deployment without a price (none of the organization's,
    none shipped, no default price for unpriced models) would cost 0 and so never count against the
    budget: the request is refused before any upstream is called (the hole of issue 19, finding 3)."""
    deployments, _ = resolve_model(config, model)
    usage = Usage(input_tokens=bound.input_bound, output_tokens=bound.output_bound)
    dearest = Decimal(0)
    for _, deployment in deployments:
        price = config.price(deployment.provider, deployment.upstream_model, at)
        if price is None:
            raise _not_priced(model, f"{deployment.provider}/{deployment.upstream_model}")
        dearest = max(dearest, cost_usd(price, usage))
    return int(dearest * NANOS_PER_USD)


def _not_priced(model: str, deployment: str) -> ModelNotPriced:
    route = "" if model == deployment else f" (it routes to {deployment})"
    return ModelNotPriced(
        f"The model '{model}'{route} has no price, and a budget applies to this request: it cannot "
        f"be charged against the budget. An admin can price {deployment} (POST /api/v1/model-prices, "
        "or the console's Models > Prices page), or set a default price for unpriced models "
        "(settings.default_price in PATCH /api/v1/organizations/current, or the console's "
        "organization settings).",
        param="model",
    )
