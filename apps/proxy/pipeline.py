"""The proxy's pipeline, one stage after another, as a request goes through it:

    authenticate (app.py) -> resolve team -> rate limits -> budget -> policies -> cache
    -> prompt template and experiment variant -> route -> call upstream -> cost -> audit (app.py)

Stages that later features fill in (rate limits, budgets, policies, cache, templates) are
pass-throughs today, so each feature lands in its own place without rearranging the others.
"""

from dataclasses import dataclass
from typing import Any

from apps.catalog.pricing import Usage, cost_usd
from apps.core.brand import header
from apps.core.errors import InvalidRequest, PermissionDenied

from .auth import AuthenticatedKey
from .config import OrganizationConfig, TeamConfig
from .http import ProxyRequest
from .routing import Candidate, allowed_regions, plan_attempts


@dataclass(slots=True)
class ProxyContext:
    request: ProxyRequest
    body: dict[str, Any]
    key: AuthenticatedKey
    config: OrganizationConfig
    team: TeamConfig | None = None
    regions: frozenset[str] | None = None


class _HeaderNames:
    def __init__(self) -> None:
        self.team = header("team")
        self.data_region = header("data-region")


_names: _HeaderNames | None = None


def names() -> _HeaderNames:
    global _names
    if _names is None:
        _names = _HeaderNames()
    return _names


def begin(request: ProxyRequest, body: dict[str, Any]) -> ProxyContext:
    context = ProxyContext(request=request, body=body, key=request.api_key, config=request.config)
    resolve_team(context)
    resolve_regions(context)
    return context


def resolve_team(context: ProxyContext) -> None:
    """The key's team, else the one the team header names (id or slug). A key bound to a team
    cannot charge another; an unknown team and another organization's read the same."""
    named = context.request.headers.get(names().team, "").strip()
    teams = context.config
    team = None
    if named:
        team = teams.teams_by_id.get(named) or teams.teams_by_slug.get(named)
        if team is None:
            raise PermissionDenied(f"No team '{named}' in this organization.", code="team_not_found")
    if context.key.team_id is not None:
        if team is not None and team.id != context.key.team_id:
            raise PermissionDenied(
                "This API key is bound to another team than the team header names.", code="team_mismatch"
            )
        team = teams.teams_by_id.get(context.key.team_id)
    context.team = team
    context.request.record.team_id = team.id if team else context.key.team_id


def resolve_regions(context: ProxyContext) -> None:
    requested = context.request.headers.get(names().data_region, "")
    narrowed = frozenset(label.strip().lower() for label in requested.split(",") if label.strip())
    context.regions = allowed_regions(
        context.config.allowed_data_regions,
        context.team.allowed_data_regions if context.team else frozenset(),
        context.key.allowed_data_regions,
        narrowed,
    )


async def enforce_rate_limits(context: ProxyContext) -> None:
    """Per-key and per-team rate limits; none are configured yet, so every request passes."""


async def enforce_budget(context: ProxyContext) -> None:
    """Team budgets; none are configured yet, so every request passes."""


async def apply_policies(context: ProxyContext) -> None:
    """Redaction and blocking policies; none are configured yet, so the body goes on unchanged."""


async def look_up_cache(context: ProxyContext) -> None:
    """The three cache tiers; until they exist every request is a miss."""
    context.request.record.cache = "miss"


async def apply_prompt_template(context: ProxyContext) -> None:
    """Prompt templates and experiment variants; none apply yet."""


async def run_stages(context: ProxyContext) -> None:
    await enforce_rate_limits(context)
    await enforce_budget(context)
    await apply_policies(context)
    await look_up_cache(context)
    await apply_prompt_template(context)


def route(context: ProxyContext) -> list[Candidate]:
    return plan_attempts(context.config, context.body["model"], context.regions)


def settle_cost(context: ProxyContext, usage: Usage | None) -> None:
    record = context.request.record
    record.usage = usage
    if usage is None or record.provider is None or record.model is None:
        return
    # The price in force when the request arrived: what reconcile will recompute it with.
    price = context.config.price(record.provider, record.model, record.started_at)
    record.cost_usd = cost_usd(price, usage)


def estimate_usage(body: dict[str, Any], output_chars: int) -> Usage:
    """About four characters a token: for upstreams that report no usage, marked estimated."""
    prompt_chars = sum(len(str(message.get("content") or "")) for message in body.get("messages", ()))
    return Usage(input_tokens=-(-prompt_chars // 4), output_tokens=-(-output_chars // 4), estimated=True)


# --- Request bodies ------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def require_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequest(
            "You must provide a model parameter (a string).", code="missing_model", param="model"
        )
    return model


def json_object(request: ProxyRequest) -> dict[str, Any]:
    body = request.json()
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    return body


def validate_chat(body: dict[str, Any]) -> None:
    require_model(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest(
            "'messages' must be a non-empty array.", code="invalid_messages", param="messages"
        )
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidRequest(
                f"messages[{index}] must be an object with a 'role' string.",
                code="invalid_messages",
                param=f"messages[{index}]",
            )
    if "stream" in body and body["stream"] is not None and not isinstance(body["stream"], bool):
        raise InvalidRequest("'stream' must be a boolean.", code="invalid_type", param="stream")
    for name in ("n", "max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (not _is_int(value) or value < 1):
            raise InvalidRequest(f"'{name}' must be a positive integer.", code="invalid_type", param=name)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise InvalidRequest(
            "'stream_options' must be an object.", code="invalid_type", param="stream_options"
        )
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, int | float)
    ):
        raise InvalidRequest("'temperature' must be a number.", code="invalid_type", param="temperature")


def validate_embeddings(body: dict[str, Any]) -> None:
    require_model(body)
    value = body.get("input")
    valid = (
        (isinstance(value, str) and value != "")
        or (isinstance(value, list) and value and all(isinstance(item, str) for item in value))
        or (isinstance(value, list) and value and all(_is_int(item) for item in value))
        or (
            isinstance(value, list)
            and value
            and all(isinstance(item, list) and item and all(_is_int(t) for t in item) for item in value)
        )
    )
    if not valid:
        raise InvalidRequest(
            "'input' must be a non-empty string, an array of strings, or token arrays.",
            code="invalid_input",
            param="input",
        )
