"""Experiments in the proxy (docs/experiments.md): a request to a target that a running experiment
splits (a model alias, or a prompt template) gets its variant before anything else sees the body.

Like prompt templates, not a stage: the variant's model, prompt version and parameters are what
admission estimates, what the policies check, what the cache keys and what goes upstream. The
variant is a pure function of the unit (the body's ``user``, else the ``x-gateway-experiment-unit``
header, else the API key) and the experiment's variants, so it needs no stored state, stays the
same across processes, and comes out the same when admission asks for a newer configuration.
"""

from typing import TYPE_CHECKING, Any

from apps.experiments.assignment import apply_variant, choose_variant, unit_of

from .http import ProxyRequest

if TYPE_CHECKING:
    from .caller import Caller
    from .endpoints import Endpoint


def assigned_body(
    endpoint: "Endpoint", request: ProxyRequest, caller: "Caller", body: dict[str, Any]
) -> dict[str, Any]:
    """The body with the variant applied; ``body`` itself when no running experiment targets it."""
    catalog = caller.config.experiments
    if endpoint.name == "models":
        return body
    experiment = None
    named = body.get("prompt")
    if endpoint.templated and isinstance(named, dict) and isinstance(named.get("id"), str):
        experiment = catalog.for_prompt(named["id"])
    model = body.get("model")
    if experiment is None and isinstance(model, str):
        experiment = catalog.for_model(model)
    if experiment is None:
        return body
    variant = choose_variant(experiment, unit_of(body, request.headers, caller.key.id))
    record = request.record
    record.experiment_id, record.experiment_variant = str(experiment.id), variant.name
    served = apply_variant(body, experiment, variant)
    limit = OUTPUT_LIMIT.get(endpoint.name)
    if limit is not None:
        # A variant's output limit is written in chat completions' names: each API has its own.
        for name in ("max_tokens", "max_completion_tokens"):
            if name != limit and name in served and name not in body:
                served[limit] = served.pop(name)
    return served


# The field that bounds the output, for the APIs whose name is not chat completions' max_tokens.
OUTPUT_LIMIT = {"responses": "max_output_tokens", "messages": "max_tokens"}
