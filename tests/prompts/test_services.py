"""The services' rules that HTTP cannot reach on its own: the generation bump on every write, labels
bound to their own template's versions, versions that stay what they were."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections
from django.db.models import RestrictedError

from apps.core.errors import Conflict, InvalidRequest
from apps.prompts import services
from apps.prompts.models import PromptLabel, PromptLabelMove, PromptTemplate, PromptVersion
from tests.management.generations import bumps_generation
from tests.prompts.conftest import SUPPORT, make_template

pytestmark = pytest.mark.django_db


def test_every_write_bumps_the_configuration_generation(
    organization, owner, django_capture_on_commit_callbacks
):
    bump = lambda: bumps_generation(organization, django_capture_on_commit_callbacks)  # noqa: E731
    with bump():
        template = services.template_create(
            organization=organization, data={"slug": "support", "name": "Support"}
        )
    with bump():
        services.template_update(template=template, data={"description": "Answers customers."})
    with bump():
        services.version_create(template=template, data=SUPPORT)
    with bump():
        services.version_create(template=template, data=SUPPORT)
    with bump():
        services.label_set(template=template, name="production", version=1, user=owner.user)
    with bump():
        services.label_set(template=template, name="production", version=2, user=owner.user)
    with bump():
        services.label_delete(label=PromptLabel.objects.get(name="production"), user=owner.user)
    with bump():
        services.template_delete(template=template)


def test_refused_writes_and_a_label_set_where_it_points_bump_nothing(
    organization, django_capture_on_commit_callbacks
):
    template = make_template(organization)
    with bumps_generation(organization, django_capture_on_commit_callbacks, bumped=False):
        with pytest.raises(Conflict):
            services.template_create(organization=organization, data={"slug": "support", "name": "Again"})
        with pytest.raises(InvalidRequest):
            services.version_create(
                template=template, data={"messages": [{"role": "user", "content": "{{x"}]}
            )
        services.label_set(template=template, name="production", version=1)
    assert PromptLabelMove.objects.count() == 1


def test_a_version_of_another_template_cannot_be_labelled(organization, outsider):
    mine = make_template(organization, "mine")
    other = make_template(organization, "other", versions=3)
    theirs = make_template(outsider.organization, "theirs")

    for version in (other.versions.get(number=3), theirs.versions.get(number=1)):
        with pytest.raises(InvalidRequest) as refused:
            services.label_set(template=mine, name="production", version=version)
        assert refused.value.fields == {"version": ["This template has no such version."]}
    with pytest.raises(InvalidRequest):
        services.label_set(template=mine, name="production", version=3)  # other's number, not mine
    assert mine.labels.get().version.number == 1


def test_a_version_is_never_changed_nor_deleted_while_labelled(organization):
    template = make_template(organization)
    version = template.versions.get()

    version.note = "changed"
    with pytest.raises(ValueError, match="immutable"):
        version.save()
    with pytest.raises(RestrictedError):
        version.delete()  # only with its template: no label can point at a version that is gone


def test_deleting_a_template_takes_its_versions_labels_and_history(organization, outsider):
    template = make_template(organization, versions=2)
    theirs = make_template(outsider.organization)
    services.label_set(template=template, name="staging", version=1)

    services.template_delete(template=template)

    assert list(PromptTemplate.objects.all()) == [theirs]
    assert PromptVersion.objects.filter(template=theirs).count() == PromptVersion.objects.count() == 1
    assert PromptLabel.objects.count() == PromptLabelMove.objects.count() == 1


def test_versions_created_one_after_another_take_the_next_numbers(organization):
    template = make_template(organization, versions=0, label=None)
    other = make_template(organization, "other", versions=2, label=None)

    numbers = [services.version_create(template=template, data=SUPPORT).number for _ in range(3)]

    assert numbers == [1, 2, 3]
    assert sorted(other.versions.values_list("number", flat=True)) == [1, 2]


@pytest.mark.django_db(transaction=True)
def test_versions_created_at_the_same_moment_get_distinct_consecutive_numbers(organization):
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL (SQLite serialises writers on its own)")
    template = make_template(organization, versions=0, label=None)

    def create(_) -> int:
        try:
            return services.version_create(template=template, data=SUPPORT).number
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=6) as pool:
        numbers = sorted(pool.map(create, range(12)))

    assert numbers == list(range(1, 13))
