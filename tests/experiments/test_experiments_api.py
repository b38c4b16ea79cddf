"""/api/v1/experiments: the lifecycle, the bad inputs of issue 13, promotion, roles, isolation, the
generation bump and the events."""

import pytest

from apps.catalog.models import ModelAlias
from apps.core.generations import local_generation
from apps.events.models import Event
from apps.experiments.selectors import experiment_snapshots
from apps.outbox.outbox import outbox
from apps.prompts.models import PromptLabel, PromptLabelMove
from tests.prompts.conftest import make_template

from .conftest import make_alias

URL = "/api/v1/experiments"


def body(**changes) -> dict:
    return {
        "name": "bigger model",
        "target": {"model": "chat"},
        "variants": [
            {"name": "control", "weight": 50},
            {"name": "large", "weight": 50, "model": "chat-large"},
        ],
    } | changes


def create(client, **changes) -> dict:
    response = client.post(URL, body(**changes), format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_an_admin_creates_a_draft_and_starts_it(session_client, aliases):
    created = create(session_client)
    assert created["status"] == "draft"
    assert created["target"] == {"model": "chat"}
    assert [v["name"] for v in created["variants"]] == ["control", "large"]
    assert created["variants"][0]["model"] is None and created["variants"][1]["model"] == "chat-large"

    started = session_client.post(f"{URL}/{created['id']}/start").json()
    assert started["status"] == "running" and started["started_at"]
    assert session_client.get(URL).json()["results"][0]["id"] == created["id"]


@pytest.mark.parametrize("reference", ["sup\x00port", "x" * 201])
def test_a_target_that_is_no_name_is_refused(session_client, aliases, reference):
    response = session_client.post(URL, body(target={"prompt": reference}), format="json")

    assert response.status_code == 400, response.content
    assert "target.prompt" in response.json()["error"]["fields"]


@pytest.mark.parametrize(
    ("variants", "field"),
    [
        ([{"name": "a", "weight": -1}, {"name": "b", "weight": 2}], "variants[0].weight"),
        ([{"name": "a", "weight": 0}, {"name": "b", "weight": 0}], "variants"),
        (
            [{"name": "a", "weight": 1}, {"name": "b", "weight": 1, "model": "no-such-model"}],
            "variants[1].model",
        ),
        ([{"name": "a", "weight": 1}, {"name": "a", "weight": 1}], "variants[1].name"),
        ([{"name": "a", "weight": 1}], "variants"),
        (
            [{"name": "a", "weight": 1}, {"name": "b", "weight": 1, "prompt_version": 2}],
            "variants[1].prompt_version",
        ),
        (
            [{"name": "a", "weight": 1}, {"name": "b", "weight": 1, "parameters": {"stream": True}}],
            "variants",
        ),
        ([{"name": "a", "weight": 1.5}, {"name": "b", "weight": 1}], "variants"),
        # Not a name at all: refused, never a query PostgreSQL cannot take.
        ([{"name": "a", "weight": 1}, {"name": "b", "weight": 1, "model": "fa\x00st"}], "variants[1].model"),
        (
            [{"name": "a", "weight": 1}, {"name": "b", "weight": 1, "model": {"alias": "fast"}}],
            "variants[1].model",
        ),
    ],
)
def test_bad_variants_are_refused_with_the_field_named(session_client, aliases, variants, field):
    response = session_client.post(URL, body(variants=variants), format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert any(name.startswith(field) for name in error["fields"]), error


def test_a_model_the_organization_does_not_have_is_refused_even_if_another_organization_has_it(
    session_client, aliases, outsider
):
    make_alias(outsider.organization, "theirs", "gpt-4o")
    variants = [{"name": "a", "weight": 1}, {"name": "b", "weight": 1, "model": "theirs"}]
    assert session_client.post(URL, body(variants=variants), format="json").status_code == 400
    assert session_client.post(URL, body(target={"model": "theirs"}), format="json").status_code == 400


def test_a_model_deleted_after_creation_is_refused_at_start(session_client, aliases):
    created = create(session_client)
    ModelAlias.objects.filter(alias="chat-large").delete()
    response = session_client.post(f"{URL}/{created['id']}/start")
    assert response.status_code == 400
    assert "variants[1].model" in response.json()["error"]["fields"]


def test_two_running_experiments_on_one_target_are_refused(session_client, aliases):
    first, second = create(session_client), create(session_client, name="another")
    assert session_client.post(f"{URL}/{first['id']}/start").status_code == 200
    response = session_client.post(f"{URL}/{second['id']}/start")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "experiment_target_busy"
    # Paused, the first lets the second run; then the first cannot resume.
    session_client.post(f"{URL}/{first['id']}/pause")
    assert session_client.post(f"{URL}/{second['id']}/start").status_code == 200
    assert (
        session_client.post(f"{URL}/{first['id']}/resume").json()["error"]["code"] == "experiment_target_busy"
    )


def test_only_a_draft_is_changed_or_deleted(session_client, aliases):
    created = create(session_client)
    renamed = session_client.patch(f"{URL}/{created['id']}", {"name": "renamed"}, format="json").json()
    assert renamed["name"] == "renamed"
    session_client.post(f"{URL}/{created['id']}/start")
    response = session_client.patch(f"{URL}/{created['id']}", {"name": "again"}, format="json")
    assert response.status_code == 409 and response.json()["error"]["code"] == "experiment_not_draft"
    assert session_client.delete(f"{URL}/{created['id']}").status_code == 409
    draft = create(session_client, name="draft")
    assert session_client.delete(f"{URL}/{draft['id']}").status_code == 204


def test_the_lifecycle_refuses_moves_out_of_order(session_client, aliases):
    created = create(session_client)
    for move in ("pause", "resume", "complete"):
        assert session_client.post(f"{URL}/{created['id']}/{move}").status_code == 409
    session_client.post(f"{URL}/{created['id']}/start")
    assert session_client.post(f"{URL}/{created['id']}/complete").json()["status"] == "completed"
    assert session_client.post(f"{URL}/{created['id']}/start").status_code == 409


def test_promoting_a_model_variant_gives_the_alias_its_deployments(session_client, organization, aliases):
    created = create(session_client)
    session_client.post(f"{URL}/{created['id']}/start")
    promoted = session_client.post(
        f"{URL}/{created['id']}/promote", {"variant": "large"}, format="json"
    ).json()
    assert promoted["status"] == "completed" and promoted["winner"] == "large"
    assert promoted["promoted_at"] and promoted["promoted_by"]
    assert promoted["promotion"]["from"][0]["upstream_model"] == "gpt-4o-mini"
    assert promoted["promotion"]["to"][0]["upstream_model"] == "gpt-4o"
    chat = ModelAlias.objects.get(organization=organization, alias="chat")
    assert [d.upstream_model for d in chat.deployments.all()] == ["gpt-4o"]
    assert experiment_snapshots(organization.id).for_model("chat") is None
    again = session_client.post(f"{URL}/{created['id']}/promote", {"variant": "large"}, format="json")
    assert again.status_code == 409


def test_promoting_a_prompt_variant_moves_the_production_label(session_client, organization, owner):
    template = make_template(organization, versions=3, label=None)
    from apps.prompts.services import label_set

    label_set(template=template, name="production", version=1)
    created = create(
        session_client,
        target={"prompt": "support"},
        variants=[
            {"name": "v1", "weight": 1, "prompt_version": 1},
            {"name": "v3", "weight": 1, "prompt_version": 3},
        ],
    )
    assert created["target"] == {"prompt": "support"}
    session_client.post(f"{URL}/{created['id']}/start")
    promoted = session_client.post(f"{URL}/{created['id']}/promote", {"variant": "v3"}, format="json").json()
    assert promoted["promotion"] == {
        "variant": "v3",
        "target": {"prompt": "support", "label": "production"},
        "from": 1,
        "to": 3,
    }
    assert PromptLabel.objects.get(template=template, name="production").version.number == 3
    move = PromptLabelMove.objects.filter(template=template, label="production").first()
    assert (move.from_version, move.to_version, move.moved_by_id) == (1, 3, owner.user_id)


def test_a_variant_with_parameters_cannot_be_promoted(session_client, aliases):
    variants = [
        {"name": "control", "weight": 1},
        {"name": "cool", "weight": 1, "parameters": {"temperature": 0.2}},
    ]
    created = create(session_client, variants=variants)
    session_client.post(f"{URL}/{created['id']}/start")
    response = session_client.post(f"{URL}/{created['id']}/promote", {"variant": "cool"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "experiment_variant_not_promotable"
    unknown = session_client.post(f"{URL}/{created['id']}/promote", {"variant": "nobody"}, format="json")
    assert unknown.status_code == 400


def test_members_read_and_admins_write(session_client, client_for, organization, aliases):
    created = create(session_client)
    member = client_for(organization, "member")
    assert member.get(f"{URL}/{created['id']}").status_code == 200
    assert member.get(f"{URL}/{created['id']}/results").status_code == 200
    assert member.post(URL, body(), format="json").status_code == 403
    assert member.post(f"{URL}/{created['id']}/start").status_code == 403
    admin = client_for(organization, "admin")
    assert admin.post(f"{URL}/{created['id']}/start").status_code == 200


def test_another_organizations_experiments_are_invisible(session_client, client_for, outsider, aliases):
    created = create(session_client)
    theirs = client_for(outsider.organization, "owner")
    assert theirs.get(URL).json()["results"] == []
    for method, path in [
        ("get", ""),
        ("get", "/results"),
        ("patch", ""),
        ("delete", ""),
        ("post", "/start"),
        ("post", "/promote"),
    ]:
        response = getattr(theirs, method)(
            f"{URL}/{created['id']}{path}", {"variant": "large"}, format="json"
        )
        assert response.status_code == 404, (method, path)


def test_a_template_of_another_organization_is_not_a_target(session_client, outsider, organization):
    make_template(outsider.organization, "theirs")
    response = session_client.post(
        URL,
        body(target={"prompt": "theirs"}, variants=[{"name": "a", "weight": 1}, {"name": "b", "weight": 1}]),
        format="json",
    )
    assert response.status_code == 400 and "target.prompt" in response.json()["error"]["fields"]


def test_writes_that_change_what_is_served_bump_the_generation(
    session_client, organization, aliases, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        created = create(session_client)
    for move in ("start", "pause", "resume", "complete"):
        before = local_generation(organization.id)
        with django_capture_on_commit_callbacks(execute=True):
            assert session_client.post(f"{URL}/{created['id']}/{move}").status_code == 200
        assert local_generation(organization.id) > before, move


@pytest.mark.django_db(transaction=True)
def test_starting_and_completing_raise_the_events(session_client, organization, aliases):
    created = create(session_client)
    session_client.post(f"{URL}/{created['id']}/start")
    session_client.post(f"{URL}/{created['id']}/promote", {"variant": "large"}, format="json")
    assert outbox().flush()
    [started] = Event.objects.filter(organization=organization, type="experiment.started")
    assert started.data == {
        "experiment_id": created["id"],
        "name": "bigger model",
        "target": {"model": "chat"},
        "variants": ["control", "large"],
    }
    [completed] = Event.objects.filter(organization=organization, type="experiment.completed")
    assert completed.data["winner"] == "large" and completed.data["promoted"] is True


@pytest.mark.django_db(transaction=True)
def test_a_refused_start_raises_no_event(session_client, organization, aliases):
    first, second = create(session_client), create(session_client, name="second")
    session_client.post(f"{URL}/{first['id']}/start")
    assert session_client.post(f"{URL}/{second['id']}/start").status_code == 409
    assert outbox().flush()
    assert Event.objects.filter(organization=organization, type="experiment.started").count() == 1
