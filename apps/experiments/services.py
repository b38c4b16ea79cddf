"""Writes of experiments and feedback (docs/experiments.md). Every value is checked here (the API,
the admin and the console all write through these): an experiment's types and shapes by its input
serializer (inputs.py), then what a schema cannot say. A write that changes what the proxy serves
(start, pause, resume, complete, promote) bumps the organization's configuration generation; a
draft's create, update and delete serve nothing and bump nothing."""

import logging
import math
from collections.abc import Mapping
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.catalog import services as catalog_services
from apps.catalog.models import ModelAlias
from apps.core.api.serializers import validated
from apps.core.errors import Conflict, InvalidRequest, RateLimited, invalid_fields
from apps.core.generations import bump_generation
from apps.events.models import EventType
from apps.events.publish import raise_event_on_commit
from apps.organizations.models import Organization
from apps.prompts import services as prompt_services
from apps.prompts.compiled import DEFAULT_LABEL

from . import selectors
from .inputs import PARAMETERS, ExperimentInputSerializer
from .models import Experiment, ExperimentStatus, Feedback, PendingFeedback, Variant
from .selectors import template_by_reference

logger = logging.getLogger(__name__)

LABEL_LENGTH = 100
COMMENT_LENGTH = 5_000
SCORE_LIMIT = 1e9


# The values of the request parameters a variant may set, checked as a prompt version's defaults are.
PARAMETER_CHECKS = {name: prompt_services.PARAMETER_CHECKS[name] for name in PARAMETERS}


# --- Experiments -----------------------------------------------------------------------------------


@transaction.atomic
def experiment_create(*, organization: Organization, data: Mapping) -> Experiment:
    """A draft. ``data``, unchecked (the API's body as it came): ``name``; ``target``,
    ``{"model": "<alias>"}`` or ``{"prompt": "<slug or id>"}``; ``variants``, ``[{"name", "weight",
    "model"?, "prompt_version"?, "parameters"?}]``, the control first. Refused (400
    ``validation_error``) for a bad name, target, weight or variant, a model the organization does not
    have, a version the template does not have."""
    values = validated(ExperimentInputSerializer, data)
    experiment = Experiment(organization=organization, status=ExperimentStatus.DRAFT, name=values["name"])
    errors: dict[str, list[str]] = {}
    _set_target(experiment, values["target"], errors)
    checked = _variants(experiment, values["variants"], errors)
    if errors:
        raise invalid_fields(errors)
    experiment.save()
    _replace_variants(experiment, checked)
    return experiment


@transaction.atomic
def experiment_update(*, experiment: Experiment, data: Mapping) -> Experiment:
    """``data``, unchecked: any of ``name``, ``target``, ``variants`` (replaces them all), as
    ``experiment_create`` takes them. Drafts only (409)."""
    changes = validated(ExperimentInputSerializer, data, partial=True)
    experiment = _locked(experiment)
    _require(experiment, ExperimentStatus.DRAFT, "changed")
    errors: dict[str, list[str]] = {}
    if "name" in changes:
        experiment.name = changes["name"]
    if "target" in changes:
        _set_target(experiment, changes["target"], errors)
    if "variants" in changes or "target" in changes:
        given = changes.get("variants")
        if given is None:  # a new target: the variants it has are checked against it
            given = [variant_values(variant) for variant in experiment.variants.all()]
        checked = _variants(experiment, given, errors)
    else:
        checked = None
    if errors:
        raise invalid_fields(errors)
    experiment.save()
    if checked is not None:
        _replace_variants(experiment, checked)
    return experiment


def experiment_delete(*, experiment: Experiment) -> None:
    """Drafts only (409): a started experiment's results and history stay."""
    with transaction.atomic():
        experiment = _locked(experiment)
        _require(experiment, ExperimentStatus.DRAFT, "deleted")
        experiment.delete()


@transaction.atomic
def experiment_start(*, experiment: Experiment) -> Experiment:
    """draft -> running. The variants are checked again against the catalog and the template as they
    are now; 409 ``experiment_target_busy`` when another experiment runs on the same target."""
    experiment = _locked(experiment)
    _require(experiment, ExperimentStatus.DRAFT, "started")
    errors: dict[str, list[str]] = {}
    _check_target_exists(experiment, errors)
    _variants(experiment, [variant_values(v) for v in experiment.variants.all()], errors)
    if errors:
        raise invalid_fields(errors)
    experiment.started_at = timezone.now()
    _run(experiment)
    raise_event_on_commit(experiment.organization_id, EventType.EXPERIMENT_STARTED, _event_data(experiment))
    return experiment


@transaction.atomic
def experiment_pause(*, experiment: Experiment) -> Experiment:
    """running -> paused: the target is served as if there were no experiment."""
    experiment = _locked(experiment)
    _require(experiment, ExperimentStatus.RUNNING, "paused")
    experiment.status = ExperimentStatus.PAUSED
    experiment.save(update_fields=["status", "updated_at"])
    bump_generation(experiment.organization_id)
    return experiment


@transaction.atomic
def experiment_resume(*, experiment: Experiment) -> Experiment:
    """paused -> running, with the same variants and weights: every unit gets the variant it had."""
    experiment = _locked(experiment)
    _require(experiment, ExperimentStatus.PAUSED, "resumed")
    _run(experiment)
    return experiment


@transaction.atomic
def experiment_complete(*, experiment: Experiment) -> Experiment:
    """running or paused -> completed, without a winner (the target stays as it is)."""
    experiment = _locked(experiment)
    _require(experiment, (ExperimentStatus.RUNNING, ExperimentStatus.PAUSED), "completed")
    _finish(experiment)
    return experiment


@transaction.atomic
def experiment_promote(*, experiment: Experiment, variant: str, user=None) -> Experiment:
    """Ends the experiment (running, paused, or completed without a winner) with ``variant`` as the
    winner and moves the target to it, in one transaction recorded on the experiment (who, when,
    from, to): a prompt target's ``production`` label moves to the variant's version; a model
    target's alias gets the deployments of the variant's model (a copy, in their priority order).
    A variant that sets neither (the control, usually) leaves the target as it is. A variant with
    parameters is refused (409 ``experiment_variant_not_promotable``): neither a label nor an
    alias can carry them."""
    experiment = _locked(experiment)
    _require(
        experiment,
        (ExperimentStatus.RUNNING, ExperimentStatus.PAUSED, ExperimentStatus.COMPLETED),
        "promoted",
    )
    if experiment.promoted_at is not None:
        raise Conflict("This experiment has been promoted already.", code="experiment_promoted")
    winner = experiment.variants.filter(name=variant).first() if isinstance(variant, str) else None
    if winner is None:
        raise invalid_fields({"variant": ["No variant of this name in the experiment."]})
    if winner.parameters:
        raise Conflict(
            f"The variant '{winner.name}' sets {', '.join(sorted(winner.parameters))}, which a "
            f"{'label' if experiment.target_template_id else 'model alias'} cannot carry; complete the "
            "experiment and send them from the application instead.",
            code="experiment_variant_not_promotable",
        )
    if experiment.target_template_id is not None:
        moved = _promote_prompt(experiment, winner, user)
    else:
        moved = _promote_model(experiment, winner)
    now = timezone.now()
    experiment.winner = winner
    experiment.promoted_at, experiment.promoted_by = now, user
    experiment.promotion = {"variant": winner.name, **moved}
    _finish(experiment, now=now)
    return experiment


def _promote_prompt(experiment: Experiment, winner: Variant, user) -> dict:
    template = experiment.target_template
    assert template is not None  # an experiment on a prompt has its template
    label = template.labels.select_related("version").filter(name=DEFAULT_LABEL).first()
    before = label.version.number if label is not None else None
    after = winner.prompt_version if winner.prompt_version is not None else before
    if after is not None and after != before:
        prompt_services.label_set(template=template, name=DEFAULT_LABEL, version=after, user=user)
    return {"target": {"prompt": template.slug, "label": DEFAULT_LABEL}, "from": before, "to": after}


def _promote_model(experiment: Experiment, winner: Variant) -> dict:
    alias = _alias(experiment.organization_id, experiment.target_model)
    if alias is None:
        raise invalid_fields({"target": [f"The model alias '{experiment.target_model}' no longer exists."]})
    before = _deployments(alias)
    after = before
    if winner.model and winner.model != alias.alias:
        source = _alias(experiment.organization_id, winner.model)
        if source is None:
            raise invalid_fields({"variant": [f"The variant's model '{winner.model}' no longer exists."]})
        after = _deployments(source)
        catalog_services.model_alias_update(model_alias=alias, data={"deployments": after})
    return {"target": {"model": alias.alias}, "from": before, "to": after}


def _deployments(alias: ModelAlias) -> list[dict]:
    return [
        {"provider": d.provider, "upstream_model": d.upstream_model, "priority": d.priority}
        for d in alias.deployments.all()
    ]


def _alias(organization_id, name: str) -> ModelAlias | None:
    return ModelAlias.objects.filter(organization_id=organization_id, alias=name).first()


def _run(experiment: Experiment) -> None:
    if _target_busy(experiment):
        raise _busy()
    experiment.status = ExperimentStatus.RUNNING
    try:
        with transaction.atomic():
            experiment.save()
    except IntegrityError as error:  # started at the same moment elsewhere: the index decided
        raise _busy() from error
    bump_generation(experiment.organization_id)


def _finish(experiment: Experiment, *, now=None) -> None:
    experiment.status = ExperimentStatus.COMPLETED
    experiment.completed_at = experiment.completed_at or now or timezone.now()
    experiment.save()
    bump_generation(experiment.organization_id)
    data = _event_data(experiment) | {
        "winner": experiment.winner.name if experiment.winner is not None else None,
        "promoted": experiment.promoted_at is not None,
    }
    raise_event_on_commit(experiment.organization_id, EventType.EXPERIMENT_COMPLETED, data)


def _target_busy(experiment: Experiment) -> bool:
    running = Experiment.objects.filter(status=ExperimentStatus.RUNNING).exclude(pk=experiment.pk)
    if experiment.target_template_id is not None:
        return running.filter(target_template_id=experiment.target_template_id).exists()
    return running.filter(
        organization_id=experiment.organization_id, target_model=experiment.target_model
    ).exists()


def _busy() -> Conflict:
    return Conflict(
        "Another experiment is running on this target; pause or complete it first.",
        code="experiment_target_busy",
    )


def _event_data(experiment: Experiment) -> dict:
    return {
        "experiment_id": str(experiment.id),
        "name": experiment.name,
        "target": target_of(experiment),
        "variants": list(experiment.variants.values_list("name", flat=True)),
    }


def target_of(experiment: Experiment) -> dict:
    if experiment.target_template is not None:
        return {"prompt": experiment.target_template.slug}
    return {"model": experiment.target_model}


def _locked(experiment: Experiment) -> Experiment:
    """The row again, locked (PostgreSQL) for the rest of the transaction: two concurrent status
    changes queue here and the second sees the first's result."""
    return (
        Experiment.objects.select_for_update(of=("self",))
        .select_related("target_template", "winner")
        .get(pk=experiment.pk)
    )


_VERBS: dict[str, str] = {
    ExperimentStatus.DRAFT: "is a draft",
    ExperimentStatus.RUNNING: "is running",
    ExperimentStatus.PAUSED: "is paused",
    ExperimentStatus.COMPLETED: "is completed",
}


def _require(experiment: Experiment, allowed, doing: str) -> None:
    allowed = (allowed,) if isinstance(allowed, str) else tuple(allowed)
    if experiment.status not in allowed:
        code = "experiment_not_draft" if allowed == (ExperimentStatus.DRAFT,) else "experiment_status"
        raise Conflict(
            f"This experiment {_VERBS[experiment.status]}; only one that is "
            f"{' or '.join(str(status) for status in allowed)} can be {doing}.",
            code=code,
        )


def _set_target(experiment: Experiment, target: dict, errors: dict) -> None:
    """``target`` parsed (inputs.py ``TargetField``): one kind, a printable name."""
    ((kind, reference),) = target.items()
    if kind == "model":
        experiment.target_model, experiment.target_template = reference, None
        if _alias(experiment.organization_id, reference) is None:
            errors["target.model"] = [f"No model alias '{reference}' in this organization."]
        return
    template = template_by_reference(experiment.organization_id, reference)
    if template is None:
        errors["target.prompt"] = [f"No prompt template '{reference}' in this organization."]
        return
    experiment.target_model, experiment.target_template = "", template


def _check_target_exists(experiment: Experiment, errors: dict) -> None:
    if (
        experiment.target_template_id is None
        and _alias(experiment.organization_id, experiment.target_model) is None
    ):
        errors["target.model"] = [f"No model alias '{experiment.target_model}' in this organization."]


def variant_values(variant: Variant) -> dict:
    values = {"name": variant.name, "weight": variant.weight, "parameters": variant.parameters}
    if variant.model:
        values["model"] = variant.model
    if variant.prompt_version is not None:
        values["prompt_version"] = variant.prompt_version
    return values


def _variants(experiment: Experiment, variants: list, errors: dict) -> list[dict]:
    """The rules of ``variants`` (parsed: inputs.py ``VariantInputSerializer``) a schema cannot say:
    distinct names, models the organization has, versions the template has, the parameters' values,
    weights that sum to more than 0."""
    template = experiment.target_template
    versions = set(template.versions.values_list("number", flat=True)) if template is not None else set()
    known = set(
        ModelAlias.objects.filter(
            organization_id=experiment.organization_id,
            # Printable only: a lone surrogate cannot even be sent to PostgreSQL in a query.
            alias__in=[v["model"] for v in variants if v.get("model") and v["model"].isprintable()],
        ).values_list("alias", flat=True)
    )
    checked, names = [], set()
    for index, variant in enumerate(variants):
        where = f"variants[{index}]"
        name = variant["name"]
        if name in names:
            errors[f"{where}.name"] = [f"'{name}' is used twice."]
        names.add(name)
        model = variant.get("model") or ""
        if model and model not in known:
            errors[f"{where}.model"] = [f"No model alias '{model}' in this organization."]
        version = variant.get("prompt_version")
        if version is not None:
            if template is None:
                errors[f"{where}.prompt_version"] = [
                    "Only an experiment on a prompt template sets a version."
                ]
            elif version not in versions:
                errors[f"{where}.prompt_version"] = ["The template has no such version."]
        parameters = variant.get("parameters") or {}
        for parameter, value in parameters.items():
            check = PARAMETER_CHECKS.get(parameter)
            if check is None:
                errors[f"{where}.parameters.{parameter}"] = [
                    f"Not a parameter a variant may set; those are: {', '.join(PARAMETERS)}."
                ]
                continue
            try:
                check(value)
            except ValueError as error:
                errors[f"{where}.parameters.{parameter}"] = [str(error)]
        if {"max_tokens", "max_completion_tokens"} <= parameters.keys():
            errors[f"{where}.parameters"] = ["Set max_tokens or max_completion_tokens, not both."]
        checked.append(
            {
                "name": name,
                "weight": variant["weight"],
                "model": model,
                "prompt_version": version,
                "parameters": dict(parameters),
            }
        )
    if sum(variant["weight"] for variant in variants) <= 0:
        errors["variants"] = ["The weights must sum to more than 0."]
    return checked


def _replace_variants(experiment: Experiment, variants: list[dict]) -> None:
    experiment.variants.all().delete()
    Variant.objects.bulk_create(
        Variant(experiment=experiment, position=position, **values)
        for position, values in enumerate(variants)
    )


# --- Feedback --------------------------------------------------------------------------------------
#
# An application sends its thumbs-up as soon as it has the answer, but the request's audit entry is
# written by the ingest about a second later (apps/outbox). So feedback on a request that is not in
# the caller's log yet waits as a ``PendingFeedback`` row and is attached when the entry is written:
# the ingest calls ``feedback_attach_pending`` for every batch it writes (apps/audit's
# ``on_entries_written``), and a sweep every minute catches up on anything that listener missed and
# removes what never found its request. The gateway's request ids are random: an id it has not
# written yet cannot be told from one it never answered, so both wait, and the answer is the same
# for another key's or organization's request, which is never attached to (it is not the giver's).

FEEDBACK_CREATED, FEEDBACK_UPDATED, FEEDBACK_PENDING = "created", "updated", "pending"
SWEEP_CHUNK = 1_000


def feedback_give(
    *,
    organization_id,
    request_id,
    score=None,
    label=None,
    comment=None,
    api_key_id=None,
    user=None,
) -> tuple[Feedback | PendingFeedback, str]:
    """What ``POST /api/v1/feedback`` does. On a request in the caller's audit log (made with
    ``api_key_id`` when a key gives it) the request's feedback is created or updated (``created``,
    ``updated``): fields not given keep their value, and at least one of score and label must
    result. On any other id it waits (``pending``) until the request's entry is written, and is
    then attached if the giver made the request, or dropped."""
    _check_feedback(score=score, label=label, comment=comment)
    giver = {"api_key_id": api_key_id, "user": user}
    values = {"score": score, "label": label, "comment": comment}
    if selectors.request_of(organization_id, request_id, api_key_id=api_key_id) is not None:
        with transaction.atomic():
            # What waited for the entry first: it was sent before this post.
            feedback_attach_pending(request_ids=[request_id])
            feedback, created = _feedback_merge(
                organization_id=organization_id, request_id=request_id, **values, **giver
            )
        return feedback, FEEDBACK_CREATED if created else FEEDBACK_UPDATED
    pending = _feedback_pend(organization_id=organization_id, request_id=request_id, **values, **giver)
    # The ingest may have written the entry after the look-up above and looked for waiting feedback
    # before this row was committed. Now that it is, look again: of two transactions that each
    # commit their row and then read the other's table, at least one sees the other's row.
    feedback_attach_pending(request_ids=[request_id])
    return pending, FEEDBACK_PENDING


def _check_feedback(*, score, label, comment) -> None:
    errors: dict[str, list[str]] = {}
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            errors["score"] = ["A finite number."]
        elif abs(score) > SCORE_LIMIT:
            errors["score"] = [f"A number from {-SCORE_LIMIT:g} to {SCORE_LIMIT:g}."]
    if label is not None and (not isinstance(label, str) or len(label) > LABEL_LENGTH or "\x00" in label):
        errors["label"] = [f"A string of at most {LABEL_LENGTH} characters, without NUL."]
    if comment is not None and (
        not isinstance(comment, str) or len(comment) > COMMENT_LENGTH or "\x00" in comment
    ):
        errors["comment"] = [f"A string of at most {COMMENT_LENGTH} characters, without NUL."]
    if errors:
        raise invalid_fields(errors)


def _no_score_nor_label() -> InvalidRequest:
    return invalid_fields({"score": ["Give a score, a label or both."]})


def _feedback_merge(
    *, organization_id, request_id, score, label, comment, api_key_id, user
) -> tuple[Feedback, bool]:
    """Creates or updates the request's feedback (the caller checked that the giver made it)."""
    with transaction.atomic():
        feedback = (
            Feedback.objects.select_for_update()
            .filter(organization_id=organization_id, request_id=request_id)
            .first()
        )
        created = feedback is None
        if feedback is None:
            feedback = Feedback(organization_id=organization_id, request_id=request_id)
        if score is not None:
            feedback.score = float(score)
        if label is not None:
            feedback.label = label.strip()
        if comment is not None:
            feedback.comment = comment
        if feedback.score is None and not feedback.label:
            raise _no_score_nor_label()
        feedback.api_key_id, feedback.user = api_key_id, user
        try:
            with transaction.atomic():
                feedback.save()
        except IntegrityError as error:  # the same request's feedback posted at the same moment
            raise Conflict(
                "Feedback on this request was being saved at the same time; try again.",
                code="feedback_conflict",
            ) from error
    return feedback, created


def _feedback_pend(
    *, organization_id, request_id, score, label, comment, api_key_id, user
) -> PendingFeedback:
    waiting = PendingFeedback.objects.filter(organization_id=organization_id)
    if waiting.count() >= settings.GATEWAY_FEEDBACK_PENDING_MAX:
        raise RateLimited(
            "Too much feedback of this organization is waiting for its requests' audit entries; "
            "try again in a few seconds.",
            code="feedback_pending_limit",
        )
    giver = {"api_key_id": api_key_id, "user": user}
    if (
        score is None
        and not (label or "").strip()
        and not waiting.filter(request_id=request_id, **giver).exists()
    ):
        raise _no_score_nor_label()
    return PendingFeedback.objects.create(
        organization_id=organization_id,
        request_id=request_id,
        score=None if score is None else float(score),
        label=label,
        comment=comment,
        **giver,
    )


def feedback_attach_pending(*, request_ids) -> int:
    """Turns the waiting feedback on these requests into their feedback, in the order it was
    sent, once their entries are written: a row whose giver made the request (its key, or a
    session of its organization) is merged in, any other is dropped; every row whose entry is
    written is removed. Rows of requests not written yet stay. Returns how many were attached."""
    if not request_ids:
        return 0
    with transaction.atomic():
        # Locked: the ingest, a post and the sweep may attach the same rows; each row once.
        waiting = list(
            PendingFeedback.objects.select_for_update()
            .filter(request_id__in=request_ids)
            .order_by("created_at", "id")
        )
        if not waiting:
            return 0
        owners = {
            entry["id"]: (entry["organization_id"], entry["api_key_id"])
            for entry in AuditEntry.objects.filter(id__in={row.request_id for row in waiting}).values(
                "id", "organization_id", "api_key_id"
            )
        }
        attached, done = 0, []
        for row in waiting:
            owner = owners.get(row.request_id)
            if owner is None:
                continue
            done.append(row.pk)
            organization_id, api_key_id = owner
            if organization_id != row.organization_id or (
                row.api_key_id is not None and row.api_key_id != api_key_id
            ):
                continue
            try:
                with transaction.atomic():
                    _feedback_merge(
                        organization_id=row.organization_id,
                        request_id=row.request_id,
                        score=row.score,
                        label=row.label,
                        comment=row.comment,
                        api_key_id=row.api_key_id,
                        user=row.user,
                    )
            except InvalidRequest:  # a comment alone, whose score or label went another way
                continue
            attached += 1
        PendingFeedback.objects.filter(pk__in=done).delete()
    return attached


def feedback_written_entries(request_ids: list[str]) -> None:
    """The ingest's listener (apps/audit ``on_entries_written``), after the batch committed. Nearly
    always nothing waits at all: one query on an empty table (0.14 ms median) instead of the locked
    look-up of the batch's ids (5.6 ms median for 500 ids; both measured here, PostgreSQL 15)."""
    if request_ids and PendingFeedback.objects.exists():
        feedback_attach_pending(request_ids=request_ids)


def feedback_pending_sweep(*, now=None) -> dict[str, int]:
    """Every minute (CELERY_BEAT_SCHEDULE): attaches what waits for an entry that is written (the
    ingest's listener missed it: a failure after the entries committed, a batch written again),
    then removes what has waited longer than ``GATEWAY_FEEDBACK_PENDING_SECONDS``: the request was
    never answered, or its entry is later than any ingest should be (docs/operations.md)."""
    now = now or timezone.now()
    attached = 0
    request_ids = PendingFeedback.objects.values_list("request_id", flat=True).distinct()
    for chunk in _chunks(list(request_ids), SWEEP_CHUNK):
        attached += feedback_attach_pending(request_ids=chunk)
    horizon = now - timedelta(seconds=settings.GATEWAY_FEEDBACK_PENDING_SECONDS)
    expired, _ = PendingFeedback.objects.filter(created_at__lt=horizon).delete()
    if expired:
        logger.warning(
            "Feedback: %d post(s) waited more than %d s for a request's audit entry and were dropped "
            "(an id the gateway never answered, or an ingest that is far behind)",
            expired,
            settings.GATEWAY_FEEDBACK_PENDING_SECONDS,
        )
    return {"attached": attached, "expired": expired}


def _chunks(values: list, size: int):
    for start in range(0, len(values), size):
        yield values[start : start + size]
