"""Experiments on the hot path: pure Python over plain data, no database (docs/experiments.md).

``selectors.experiment_snapshots(organization_id)`` builds an ``ExperimentCatalog`` of the running
experiments once per configuration generation. Per request the proxy asks the catalog for the
experiment of the body's target (``for_model`` / ``for_prompt``), picks the unit (``unit_of``), the
variant (``choose_variant``: a hash of the experiment id and the unit over the cumulative weights,
so the same unit always lands on the same variant while the variants stay the same, with no stored
state) and applies it (``apply_variant``: a new body).
"""

import hashlib
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from apps.core.brand import header_names

# A unit longer than this is hashed by its first characters only: a long ``user`` must not cost a
# long hash on every request.
UNIT_LENGTH = 512
# max_tokens and max_completion_tokens say the same thing: a variant's one replaces the body's other.
_SAME_LIMIT = {"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}


@dataclass(frozen=True, slots=True)
class VariantSnapshot:
    name: str
    weight: int
    model: str | None  # an alias of the organization's catalog
    prompt_version: int | None
    parameters: tuple[tuple[str, Any], ...]  # (name, scalar value), from the allow-list
    control: bool


@dataclass(frozen=True, slots=True)
class ExperimentSnapshot:
    id: str
    name: str
    target_model: str | None
    target_template_id: str | None
    target_template_slug: str | None
    variants: tuple[VariantSnapshot, ...]
    # Running totals of the weights, in variant order; the last is the sum (> 0).
    cumulative: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ExperimentCatalog:
    """An organization's running experiments by target: model alias, template slug and template id
    (canonical lowercase UUID string)."""

    by_model: Mapping[str, ExperimentSnapshot]
    by_prompt: Mapping[str, ExperimentSnapshot]

    def for_model(self, alias: str) -> ExperimentSnapshot | None:
        return self.by_model.get(alias)

    def for_prompt(self, template_slug_or_id: str) -> ExperimentSnapshot | None:
        found = self.by_prompt.get(template_slug_or_id)
        if found is None and isinstance(template_slug_or_id, str):
            found = self.by_prompt.get(template_slug_or_id.lower())
        return found


EMPTY_CATALOG = ExperimentCatalog(by_model={}, by_prompt={})


def experiment_snapshot(
    *,
    id: str,
    name: str,
    target_model: str | None,
    target_template_id: str | None,
    target_template_slug: str | None,
    variants,
) -> ExperimentSnapshot:
    """``variants``: (name, weight, model, prompt_version, parameters) in order, the control first."""
    snapshots, cumulative, total = [], [], 0
    for position, (variant_name, weight, model, prompt_version, parameters) in enumerate(variants):
        snapshots.append(
            VariantSnapshot(
                name=variant_name,
                weight=weight,
                model=model or None,
                prompt_version=prompt_version,
                parameters=tuple(sorted((parameters or {}).items())),
                control=position == 0,
            )
        )
        total += weight
        cumulative.append(total)
    if total <= 0:
        raise ValueError("an experiment's weights must sum to more than 0")
    return ExperimentSnapshot(
        id=str(id),
        name=name,
        target_model=target_model or None,
        target_template_id=str(target_template_id) if target_template_id else None,
        target_template_slug=target_template_slug,
        variants=tuple(snapshots),
        cumulative=tuple(cumulative),
    )


def unit_of(body: Mapping[str, Any], headers: Mapping[str, str], api_key_id: str) -> str:
    """What assignment is sticky to: the body's ``user`` (a non-empty string), else the
    ``x-gateway-experiment-unit`` header (``headers`` with lowercase names), else the API key id.
    Prefixed by where it came from, so a ``user`` equal to a key id is not that key's unit."""
    user = body.get("user")
    if isinstance(user, str) and user:
        return "user:" + user[:UNIT_LENGTH]
    unit = headers.get(header_names().experiment_unit)
    if unit:
        return "unit:" + unit[:UNIT_LENGTH]
    return "key:" + str(api_key_id)


def choose_variant(experiment: ExperimentSnapshot, unit: str) -> VariantSnapshot:
    """The unit's variant: the first 8 bytes of BLAKE2b(experiment id, unit) as a number, modulo the
    sum of the weights, placed on the running totals. A pure function of the experiment id, the
    unit and the weights: pausing and resuming change nothing; changing weights would (they can
    only change while the experiment is a draft)."""
    digest = hashlib.blake2b(f"{experiment.id}\x00{unit}".encode(), digest_size=8).digest()
    # 2**64 modulo a sum of at most a few million weights: the bias is below 1e-12.
    point = int.from_bytes(digest, "big") % experiment.cumulative[-1]
    return experiment.variants[bisect_right(experiment.cumulative, point)]


def apply_variant(body: dict, experiment: ExperimentSnapshot, variant: VariantSnapshot) -> dict:
    """A new body (``body`` is not changed): the variant's ``model`` replaces the body's model, its
    ``prompt_version`` becomes ``body["prompt"]["version"]`` (the template is rendered after this),
    and its parameters replace the body's (a variant's ``max_tokens`` removes the body's
    ``max_completion_tokens`` and the other way round). A control with nothing set returns an equal
    copy."""
    served = dict(body)
    if variant.model is not None:
        served["model"] = variant.model
    if variant.prompt_version is not None and isinstance(body.get("prompt"), dict):
        served["prompt"] = {**body["prompt"], "version": variant.prompt_version}
    for name, value in variant.parameters:
        other = _SAME_LIMIT.get(name)
        if other is not None:
            served.pop(other, None)
        served[name] = value
    return served
