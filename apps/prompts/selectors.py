"""Reads of prompt templates, and the plain-data catalog the proxy renders from."""

import uuid

from django.db.models import Prefetch, Q, QuerySet

from .catalog import PromptCatalog, TemplateSnapshot, version_snapshot
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
