"""Reads of prompt templates, and the plain-data catalog the proxy renders from."""

import uuid

from django.db.models import Prefetch, Q, QuerySet

from .compiled import PromptCatalog, Rendered, TemplateSnapshot, render_request, version_snapshot
from .models import PromptLabel, PromptLabelMove, PromptTemplate, PromptVersion


def templates_of(organization_id) -> QuerySet[PromptTemplate]:
    return PromptTemplate.objects.filter(organization_id=organization_id)


def template_by_reference(templates: QuerySet[PromptTemplate], reference: str) -> PromptTemplate | None:
    """The template of ``templates`` whose slug or id is ``reference`` (slugs are never UUIDs)."""
    match = Q(slug=reference)
    try:
        match |= Q(id=uuid.UUID(reference))
    except ValueError:
        pass
    return templates.filter(match).first()


def label_history(template: PromptTemplate, label: str) -> QuerySet[PromptLabelMove]:
    """Every set, move and removal of the label, newest first (it outlives a removed label)."""
    return PromptLabelMove.objects.filter(template=template, label=label).select_related("moved_by")


def prompt_snapshots(organization_id) -> PromptCatalog:
    """The organization's templates as plain data (``catalog.PromptCatalog``), in three queries: what
    the proxy renders from, rebuilt when the organization's configuration generation moves."""
    templates = templates_of(organization_id).prefetch_related(
        Prefetch(
            "versions",
            queryset=PromptVersion.objects.only("template_id", "number", "messages", "variables", "defaults"),
        ),
        Prefetch(
            "labels",
            queryset=PromptLabel.objects.select_related("version").only(
                "template_id", "name", "version__number"
            ),
        ),
    )
    by_slug, by_id = {}, {}
    for template in templates:
        snapshot = template_snapshot(template)
        by_slug[snapshot.slug] = snapshot
        by_id[snapshot.id] = snapshot
    return PromptCatalog(by_slug=by_slug, by_id=by_id)


def template_snapshot(template: PromptTemplate) -> TemplateSnapshot:
    versions = {
        version.number: version_snapshot(
            number=version.number,
            messages=version.messages,
            variables=version.variables,
            defaults=version.defaults,
        )
        for version in template.versions.all()
    }
    return TemplateSnapshot(
        id=str(template.id),
        slug=template.slug,
        versions=versions,
        labels={label.name: label.version.number for label in template.labels.all()},
        latest=max(versions, default=None),
    )


def label_moves_of(template: PromptTemplate) -> QuerySet[PromptLabelMove]:
    """Every set, move and removal of every label of the template, newest first."""
    return (
        PromptLabelMove.objects.filter(template=template)
        .select_related("moved_by")
        .order_by("-created_at", "-id")
    )


def template_render(template: PromptTemplate, *, version=None, variables=None) -> Rendered:
    """What ``version`` (a number, digits or a label; default ``production``) of the template
    renders with ``variables``, exactly as the proxy would, without calling a model: the answer of
    ``POST /api/v1/prompt-templates/{id}/render``. Raises the proxy's errors (400
    ``prompt_not_found``, ``prompt_variable_missing``, ``prompt_variable_unknown``,
    ``invalid_prompt``)."""
    snapshot = template_snapshot(template)
    catalog = PromptCatalog(by_slug={snapshot.slug: snapshot}, by_id={snapshot.id: snapshot})
    prompt: dict = {"id": snapshot.id}
    if version is not None:
        prompt["version"] = version
    if variables is not None:
        prompt["variables"] = variables
    return render_request(catalog, prompt)
