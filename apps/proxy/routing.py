"""Which upstream a request goes to, and in which order the others are tried.

- Candidates: the active keys of each deployment's provider whose data region is allowed (the
  organization's, team's and key's regions, narrowed by the ``x-gateway-data-region`` header).
- Weighted rotation: smooth weighted round-robin (as nginx does) over the candidates of one
  deployment, so over many requests each key's share matches its weight, evenly interleaved.
- Failover order: the rotation's pick, then that deployment's other keys by weight, then the next
  deployment, then the fallback aliases' deployments; at most ``GATEWAY_MAX_ATTEMPTS`` in all.
- Circuit breaker: a key that failed ``GATEWAY_BREAKER_FAILURES`` times in a row (or was told to
  wait by a 429) is skipped for ``GATEWAY_BREAKER_COOLDOWN_SECONDS``; then it is half-open: one
  request at a time tries it (a trial, first in that request's order), the others keep to the healthy
  keys until a trial succeeds. A failed trial opens it again. No hedging: the trial's client is not
  sent to a second key at the same time; if the trial fails it fails over like any attempt.

All state is this worker's memory: no I/O here.
"""

import asyncio
import contextvars
import time
from dataclasses import dataclass

from django.conf import settings

from apps.catalog.selectors import AliasSnapshot, DeploymentSnapshot
from apps.core.errors import GatewayError, NotFound, PermissionDenied
from apps.core.model_patterns import ModelAllowList
from apps.observability import metrics
from apps.providers.models import Provider
from apps.providers.selectors import ProviderKeySnapshot

from .config import OrganizationConfig, render_models_body
from .runtime import runtime

PROVIDERS = frozenset(Provider.values)


class NoCandidate(GatewayError):
    status = 503
    type = "service_unavailable_error"
    code = "no_upstream_available"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One planned attempt."""

    alias: str | None  # the catalog alias it came from; None for an explicit provider/model
    deployment: DeploymentSnapshot
    key: ProviderKeySnapshot
    trial: bool = False  # the key is half-open: tried only if this request wins its one trial


class SmoothWeightedRoundRobin:
    """Per set of keys, each key's running weight grows by its weight on every pick and the
    chosen one gives back the total, so picks follow the weights exactly and evenly spread."""

    _MAX_SETS = 10_000

    def __init__(self) -> None:
        self._current: dict[tuple[tuple[str, float], ...], dict[str, float]] = {}

    def pick(self, keys: list[ProviderKeySnapshot]) -> ProviderKeySnapshot:
        if len(keys) == 1:
            return keys[0]
        signature = tuple((key.id, key.weight) for key in keys)
        current = self._current.get(signature)
        if current is None:
            if len(self._current) >= self._MAX_SETS:
                self._current.clear()
            current = self._current[signature] = dict.fromkeys((key.id for key in keys), 0.0)
        total = 0.0
        best: ProviderKeySnapshot | None = None
        for key in keys:
            current[key.id] += key.weight
            total += key.weight
            if best is None or current[key.id] > current[best.id]:
                best = key
        assert best is not None
        current[best.id] -= total
        return best

    def clear(self) -> None:
        self._current.clear()


class CircuitBreaker:
    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self._failures: dict[str, int] = {}
        self._open_until: dict[str, float] = {}
        self._providers: dict[str, str] = {}  # of the keys that failed: the breaker metric's label
        self._shown_open: set[str] = set()  # the keys gateway_breaker_open shows as 1
        # Half-open keys whose one trial request is under way, until when the trial may hold it: a
        # trial whose request vanished without a word (cancelled) cannot keep the key shut for good.
        self._trial_until: dict[str, float] = {}

    def is_available(self, key_id: str, now: float) -> bool:
        """Closed: routed to as usual (an open or half-open key is not)."""
        return key_id not in self._open_until

    def is_trial_free(self, key_id: str, now: float) -> bool:
        """Half-open with no trial under way: the next request may try the key."""
        return self._open_until[key_id] <= now and self._trial_until.get(key_id, 0.0) <= now

    def claim_trial(self, key_id: str) -> bool:
        """True if the caller may send its attempt to this key: it is closed again, or half-open and
        the caller now holds its one trial (until it reports success or failure, or the deadline)."""
        until = self._open_until.get(key_id)
        if until is None:
            return True
        now = self.clock()
        if until > now or self._trial_until.get(key_id, 0.0) > now:
            return False
        self._trial_until[key_id] = now + settings.GATEWAY_REQUEST_DEADLINE_SECONDS
        return True

    def end_trial(self, key_id: str) -> None:
        """The trial's request is over without a verdict (cancelled): the next request may try."""
        self._trial_until.pop(key_id, None)

    def reopens_in(self, key_ids: list[str], now: float) -> float:
        """Seconds until the first of these keys may be tried again."""
        return max(0.0, min((self._open_until.get(key_id, 0.0) for key_id in key_ids), default=0.0) - now)

    def record_success(self, key_id: str) -> None:
        if key_id in self._failures:
            del self._failures[key_id]
            self._open_until.pop(key_id, None)
            self._trial_until.pop(key_id, None)
            self._show(key_id, is_open=False)

    def record_failure(self, key_id: str, *, provider: str = "", retry_after: float | None = None) -> None:
        now = self.clock()
        self._trial_until.pop(key_id, None)
        failures = self._failures.get(key_id, 0) + 1
        self._failures[key_id] = failures
        if failures >= settings.GATEWAY_BREAKER_FAILURES:
            self._open_until[key_id] = now + settings.GATEWAY_BREAKER_COOLDOWN_SECONDS
        if retry_after:
            # The upstream said how long to wait: no request to this key before then.
            until = now + min(retry_after, settings.GATEWAY_BREAKER_COOLDOWN_SECONDS)
            self._open_until[key_id] = max(self._open_until.get(key_id, 0.0), until)
        if self._open_until.get(key_id, 0.0) > now:
            self._providers[key_id] = provider
            self._show(key_id, is_open=True)
            self._check_when_cooled(key_id, self._open_until[key_id] - now)

    def clear(self) -> None:
        for key_id in list(self._shown_open):
            self._show(key_id, is_open=False)
        self._failures.clear()
        self._open_until.clear()
        self._trial_until.clear()
        self._providers.clear()

    # --- The metric: 1 while a key's cooldown holds requests back, 0 once it may be tried again --

    def _show(self, key_id: str, *, is_open: bool) -> None:
        if is_open == (key_id in self._shown_open):
            return
        if is_open:
            self._shown_open.add(key_id)
        else:
            self._shown_open.discard(key_id)
        metrics.breaker_shown(self._providers.get(key_id, ""), key_id, is_open=is_open)

    def _check_when_cooled(self, key_id: str, seconds: float) -> None:
        """Shows the key closed once its cooldown is over (half-open: the next request may try it),
        even when no request comes to try it (a fallback's key, a key taken out of the catalog)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on an event loop (a script, a test): shown at the next verdict
            return
        loop.call_later(seconds, self._cooled, key_id, context=contextvars.Context())

    def _cooled(self, key_id: str) -> None:
        until = self._open_until.get(key_id)
        if until is not None and until > self.clock():
            return  # opened again meanwhile: that failure's own timer comes later
        self._show(key_id, is_open=False)


def allowed_regions(*restrictions: frozenset[str]) -> frozenset[str] | None:
    """The regions every restriction allows; None means unrestricted. An empty restriction
    allows everything; an empty result means nothing is allowed."""
    allowed: frozenset[str] | None = None
    for restriction in restrictions:
        if restriction:
            allowed = restriction if allowed is None else allowed & restriction
    return allowed


def resolve_model(
    config: OrganizationConfig, model: str
) -> tuple[list[tuple[str | None, DeploymentSnapshot]], str]:
    """The deployments to try for ``model``, in order, each with the alias it came from, and the
    name the request is known by. An alias of the catalog wins over a ``provider/model`` reading."""
    alias = config.aliases.get(model)
    if alias is not None:
        planned = config.planned_deployments.get(model)
        if planned is None:  # built once per alias and configuration generation
            planned = config.planned_deployments[model] = _alias_deployments(config, alias)
        return planned, model
    provider, slash, upstream_model = model.partition("/")
    if slash and provider in PROVIDERS and upstream_model:
        return [(None, DeploymentSnapshot(provider=provider, upstream_model=upstream_model))], model
    raise NotFound(
        f"The model '{model}' does not exist in this organization's catalog; "
        "use a model alias (GET /v1/models) or provider/model.",
        code="model_not_found",
        param="model",
    )


class ModelNotAllowed(PermissionDenied):
    code = "model_not_allowed"


def refuse_unallowed_model(
    config: OrganizationConfig, model: str, scopes: list[tuple[str, ModelAllowList | None]]
) -> None:
    """Raises ModelNotAllowed unless every allow-list that applies (``scopes``: the organization's,
    the team's and the key's, each named) allows ``model``. A list allows a name it matches; it
    allows an alias it does not name when it matches every deployment the alias may route to
    (``openai/gpt-4o*`` allows an alias served by openai/gpt-4o-mini). Checked on the resolved model
    only for catalog aliases: a request for an unknown name under a list is refused here, like one
    for a model outside it, so a restricted caller learns nothing of what else exists."""
    routes = None
    for scope, allowed in scopes:
        if allowed is None or allowed.allows(model):
            continue
        if routes is None:
            routes = _routes(config, model)
        if routes and all(allowed.allows(route) for route in routes):
            continue
        raise ModelNotAllowed(
            f"The model '{model}' is not allowed for this request: it is outside the {scope}'s model "
            "allow-list. GET /v1/models lists the models it may call.",
            param="model",
        )


def _routes(config: OrganizationConfig, model: str) -> tuple[str, ...]:
    """The provider/model names an alias may reach (its deployments and its fallbacks'); () else."""
    if model not in config.aliases:
        return ()
    deployments, _ = resolve_model(config, model)
    return tuple(f"{d.provider}/{d.upstream_model}" for _, d in deployments)


def allow_lists(config: OrganizationConfig, team, key) -> list[tuple[str, ModelAllowList | None]]:
    return [
        ("organization", config.allowed_models),
        ("team", team.allowed_models if team is not None else None),
        ("API key", key.allowed_models),
    ]


_MAX_RESTRICTED_BODIES = 1_000


def models_body_for(config: OrganizationConfig, team, key) -> bytes:
    """/v1/models as the caller may call it: the aliases every allow-list that applies lets through.
    Rendered once per generation and combination of lists (a few per organization)."""
    scopes = allow_lists(config, team, key)
    if all(allowed is None for _, allowed in scopes):
        return config.models_body
    signature = tuple(allowed.patterns if allowed is not None else None for _, allowed in scopes)
    body = config.restricted_models_bodies.get(signature)
    if body is None:
        visible = []
        for alias in config.aliases.values():
            try:
                refuse_unallowed_model(config, alias.alias, scopes)
            except ModelNotAllowed:
                continue
            visible.append(alias)
        if len(config.restricted_models_bodies) >= _MAX_RESTRICTED_BODIES:
            config.restricted_models_bodies.clear()
        body = config.restricted_models_bodies[signature] = render_models_body(visible)
    return body


def _alias_deployments(
    config: OrganizationConfig, alias: AliasSnapshot
) -> list[tuple[str | None, DeploymentSnapshot]]:
    planned = [(alias.alias, deployment) for deployment in alias.deployments]
    for name in alias.fallbacks:
        fallback = config.aliases.get(name)
        if fallback is not None:  # one level: a fallback's own fallbacks are not followed
            planned.extend((fallback.alias, deployment) for deployment in fallback.deployments)
    seen: set[DeploymentSnapshot] = set()
    unique: list[tuple[str | None, DeploymentSnapshot]] = []
    for name, deployment in planned:
        if deployment not in seen:
            seen.add(deployment)
            unique.append((name, deployment))
    return unique


def plan_attempts(config: OrganizationConfig, model: str, regions: frozenset[str] | None) -> list[Candidate]:
    deployments, _ = resolve_model(config, model)
    now = runtime.breaker.clock()
    plan: list[Candidate] = []
    providers_without_keys: list[str] = []
    keys_outside_region: list[str] = []
    cooling: list[str] = []
    trials = 0
    for alias, deployment in deployments:
        keys = config.keys_by_provider.get(deployment.provider, ())
        if not keys:
            providers_without_keys.append(deployment.provider)
            continue
        in_region = [k for k in keys if k.weight > 0 and (regions is None or k.data_region in regions)]
        if not in_region:
            keys_outside_region.append(deployment.provider)
            continue
        healthy = [k for k in in_region if runtime.breaker.is_available(k.id, now)]
        if len(healthy) < len(in_region):
            for key in in_region:
                if key in healthy:
                    continue
                if runtime.breaker.is_trial_free(key.id, now):
                    # First, or the trial would happen only when the healthy keys fail; the
                    # Forwarder claims it, and skips the key if another request got there first.
                    trials += 1
                    plan.append(Candidate(alias=alias, deployment=deployment, key=key, trial=True))
                else:
                    cooling.append(key.id)
        if not healthy:
            continue
        first = runtime.rotation.pick(healthy)
        ordered = [first, *sorted((k for k in healthy if k is not first), key=lambda k: -k.weight)]
        plan.extend(Candidate(alias=alias, deployment=deployment, key=key) for key in ordered)
    if plan:
        # The Forwarder stops at GATEWAY_MAX_ATTEMPTS; a trial it cannot claim is no attempt.
        return plan[: settings.GATEWAY_MAX_ATTEMPTS + trials]
    if cooling:
        wait = runtime.breaker.reopens_in(cooling, now)
        raise NoCandidate(
            "Every upstream for this model is cooling down after repeated failures; retry shortly.",
            code="upstreams_cooling_down",
            headers={"retry-after": str(max(1, round(wait)))},
        )
    if keys_outside_region:
        raise NoCandidate(
            "No provider key for this model is in an allowed data region "
            f"({', '.join(sorted(regions or ())) or 'none allowed'}).",
            code="no_key_in_region",
            headers={"x-should-retry": "false"},
        )
    raise NoCandidate(
        f"The gateway holds no active provider key for {', '.join(sorted(set(providers_without_keys)))}.",
        code="no_provider_key",
        headers={"x-should-retry": "false"},
    )
