"""Reads of experiments and feedback, and the plain-data catalog the proxy assigns from."""

from django.db.models import Prefetch, QuerySet

from apps.audit.models import AuditEntry
from apps.prompts import selectors as prompt_selectors
from apps.prompts.models import PromptTemplate

from .assignment import ExperimentCatalog, experiment_snapshot
from .models import Experiment, ExperimentStatus, Feedback, Variant


def experiments_of(organization_id) -> QuerySet[Experiment]:
    return Experiment.objects.filter(organization_id=organization_id)


def template_by_reference(organization_id, reference: str) -> PromptTemplate | None:
    return prompt_selectors.template_by_reference(prompt_selectors.templates_of(organization_id), reference)


def experiment_snapshots(organization_id) -> ExperimentCatalog:
    """The organization's running experiments as plain data, in two queries (experiments with their
    template's slug, then their variants): rebuilt when the configuration generation moves."""
    running = (
        experiments_of(organization_id)
        .filter(status=ExperimentStatus.RUNNING)
        .select_related("target_template")
        .only("id", "name", "target_model", "target_template__id", "target_template__slug")
        .prefetch_related(
            Prefetch(
                "variants",
                queryset=Variant.objects.only(
                    "experiment_id", "name", "position", "weight", "model", "prompt_version", "parameters"
                ),
            )
        )
    )
    by_model, by_prompt = {}, {}
    for experiment in running:
        template = experiment.target_template
        snapshot = experiment_snapshot(
            id=str(experiment.id),
            name=experiment.name,
            target_model=experiment.target_model,
            target_template_id=str(template.id) if template else None,
            target_template_slug=template.slug if template else None,
            variants=[
                (v.name, v.weight, v.model, v.prompt_version, v.parameters) for v in experiment.variants.all()
            ],
        )
        if template is None:
            by_model[snapshot.target_model] = snapshot
        else:
            by_prompt[snapshot.target_template_slug] = snapshot
            by_prompt[snapshot.target_template_id] = snapshot
    return ExperimentCatalog(by_model=by_model, by_prompt=by_prompt)


def request_of(organization_id, request_id, *, api_key_id=None) -> AuditEntry | None:
    """The audit entry of a request of the organization (made with ``api_key_id`` when given)."""
    entries = AuditEntry.objects.filter(organization_id=organization_id, id=request_id)
    if api_key_id is not None:
        entries = entries.filter(api_key_id=api_key_id)
    return entries.only("id").first()


def feedback_of(organization_id) -> QuerySet[Feedback]:
    return Feedback.objects.filter(organization_id=organization_id)
