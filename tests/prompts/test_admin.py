"""The admin console writes prompts through the services: versions checked and numbered, labels
moved with a record, nothing changed or deleted around them."""

import json

import pytest

from apps.prompts.models import PromptLabel, PromptLabelMove, PromptVersion
from tests.management.generations import bumps_generation
from tests.prompts.conftest import SUPPORT, make_template

pytestmark = pytest.mark.django_db


def version_form(template, **values) -> dict:
    return {
        "template": str(template.id),
        "messages": json.dumps(SUPPORT["messages"]),
        "variables": json.dumps(SUPPORT["variables"]),
        "defaults": json.dumps(SUPPORT["defaults"]),
        "note": "from the admin",
        **values,
    }


def test_a_version_is_created_through_the_service_and_a_bad_one_refused(
    admin_client, organization, django_capture_on_commit_callbacks
):
    template = make_template(organization)
    bad = version_form(template, messages=json.dumps([{"role": "user", "content": "{{question"}]))

    refused = admin_client.post("/admin/prompts/promptversion/add/", bad, follow=True)
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        created = admin_client.post("/admin/prompts/promptversion/add/", version_form(template))

    assert "never closed" in refused.content.decode()
    assert created.status_code == 302
    version = PromptVersion.objects.get(template=template, number=2)
    assert (version.note, version.created_by.is_staff) == ("from the admin", True)


def test_a_version_cannot_be_changed_or_deleted_in_the_admin(admin_client, organization):
    version = make_template(organization).versions.get()

    page = admin_client.get(f"/admin/prompts/promptversion/{version.pk}/change/")
    deleted = admin_client.post(f"/admin/prompts/promptversion/{version.pk}/delete/", {"post": "yes"})

    assert page.status_code == 200
    assert 'name="messages"' not in page.content.decode()  # read only
    assert deleted.status_code == 403
    assert PromptVersion.objects.filter(pk=version.pk).exists()


def test_moving_a_label_in_the_admin_records_the_move(
    admin_client, organization, django_capture_on_commit_callbacks
):
    template = make_template(organization, versions=2)
    label = PromptLabel.objects.get(template=template)
    first = template.versions.get(number=1)

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = admin_client.post(
            f"/admin/prompts/promptlabel/{label.pk}/change/", {"version": str(first.pk)}
        )

    assert response.status_code == 302
    label.refresh_from_db()
    assert label.version == first
    move = PromptLabelMove.objects.filter(template=template).first()
    assert (move.from_version, move.to_version, move.moved_by.is_staff) == (2, 1, True)


def test_a_label_on_another_templates_version_is_refused_in_the_admin(admin_client, organization):
    template = make_template(organization, label=None)
    other = make_template(organization, "other")

    response = admin_client.post(
        "/admin/prompts/promptlabel/add/",
        {"template": str(template.id), "name": "production", "version": str(other.versions.get().pk)},
        follow=True,
    )

    assert "no such version" in response.content.decode()
    assert not template.labels.exists()


def test_a_template_is_created_and_deleted_through_the_services(admin_client, organization):
    created = admin_client.post(
        "/admin/prompts/prompttemplate/add/",
        {
            "organization": str(organization.id),
            "slug": "Bad Slug",
            "name": "x",
            "description": "",
            "versions-TOTAL_FORMS": "0",
            "versions-INITIAL_FORMS": "0",
            "labels-TOTAL_FORMS": "0",
            "labels-INITIAL_FORMS": "0",
        },
        follow=True,
    )
    template = make_template(organization, versions=2)

    deleted = admin_client.post(f"/admin/prompts/prompttemplate/{template.pk}/delete/", {"post": "yes"})

    assert "does not match the required pattern" in created.content.decode()  # the API's words
    assert deleted.status_code == 302
    assert not PromptVersion.objects.exists()
