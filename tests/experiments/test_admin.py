"""The admin console writes experiments through the services: a draft's variants are checked, and
the start action refuses a busy target."""

import pytest
from django.test import Client

from apps.experiments.models import Experiment
from tests.factories import UserFactory

from .conftest import model_experiment


@pytest.fixture
def browser(db) -> Client:
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_a_draft_made_in_the_admin_is_checked_by_the_service(browser, organization, aliases):
    form = {
        "organization": organization.pk,
        "name": "from the admin",
        "target_model": "chat",
        "target_template": "",
        "variants_json": '[{"name": "a", "weight": 1}, {"name": "b", "weight": 1, "model": "nowhere"}]',
        "variants-TOTAL_FORMS": 0,
        "variants-INITIAL_FORMS": 0,
    }
    browser.post("/admin/experiments/experiment/add/", form)
    assert not Experiment.objects.exists()
    form["variants_json"] = '[{"name": "a", "weight": 1}, {"name": "b", "weight": 1, "model": "chat-large"}]'
    browser.post("/admin/experiments/experiment/add/", form)
    experiment = Experiment.objects.get()
    assert [v.name for v in experiment.variants.all()] == ["a", "b"]


def test_the_start_action_starts_through_the_service(browser, organization, aliases):
    first, second = model_experiment(organization), model_experiment(organization, name="second")
    url = "/admin/experiments/experiment/"
    browser.post(url, {"action": "start", "_selected_action": [first.pk, second.pk]})
    statuses = sorted(Experiment.objects.values_list("status", flat=True))
    assert statuses == ["draft", "running"]
