"""/api/v1/prompt-templates: templates, versions, labels and their history, the render action, roles,
and another organization's templates."""

import pytest

from apps.prompts.models import PromptLabelMove, PromptVersion
from tests.management.errors import assert_error
from tests.prompts.conftest import SUPPORT

pytestmark = pytest.mark.django_db

URL = "/api/v1/prompt-templates"


def create_template(client, slug="support", **values) -> dict:
    response = client.post(
        URL, {"slug": slug, "name": "Support", "description": "Answers.", **values}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


def create_version(client, reference, **values) -> dict:
    response = client.post(f"{URL}/{reference}/versions", {**SUPPORT, **values}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_it_creates_lists_reads_changes_and_deletes_a_template(session_client):
    body = create_template(session_client)

    assert (body["slug"], body["name"], body["description"], body["labels"], body["latest_version"]) == (
        "support",
        "Support",
        "Answers.",
        {},
        None,
    )
    assert body["created_at"].endswith("Z")
    assert [t["id"] for t in session_client.get(URL).json()["results"]] == [body["id"]]
    assert session_client.get(f"{URL}/{body['id']}").json() == body
    assert session_client.get(f"{URL}/support").json() == body

    patched = session_client.patch(f"{URL}/support", {"name": "Help desk", "slug": "help"}, format="json")
    assert patched.status_code == 200
    assert (patched.json()["name"], patched.json()["slug"]) == ("Help desk", "help")
    assert_error(session_client.get(f"{URL}/support"), 404, "not_found")

    assert session_client.delete(f"{URL}/help").status_code == 204
    assert_error(session_client.get(f"{URL}/{body['id']}"), 404, "not_found")


def test_a_second_template_with_the_same_slug_is_a_conflict(session_client):
    create_template(session_client)

    assert_error(
        session_client.post(URL, {"slug": "support", "name": "x"}, format="json"), 409, "prompt_slug_taken"
    )


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"slug": "Support"}, "slug"),
        ({"slug": "has space"}, "slug"),
        ({"slug": "0b8f2a6e-6d6c-4c7e-9a51-3f1e2b7c9d10"}, "slug"),
        ({"slug": "0b8f2a6e6d6c4c7e9a513f1e2b7c9d10"}, "slug"),
        ({"slug": 5}, "slug"),
        ({"name": "   "}, "name"),
        ({"name": "x" * 201}, "name"),
    ],
)
def test_it_refuses_invalid_template_values(session_client, values, field):
    error = assert_error(
        session_client.post(URL, {"slug": "ok", "name": "Ok", **values}, format="json"),
        400,
        "validation_error",
    )

    assert field in error["fields"], error["fields"]


def test_versions_are_numbered_from_one_listed_read_and_never_updated(session_client, owner):
    template = create_template(session_client)

    first = create_version(session_client, "support", note="first draft")
    second = create_version(session_client, template["id"], defaults={"model": "gpt-4o"})

    assert (first["version"], second["version"]) == (1, 2)
    assert first["messages"] == SUPPORT["messages"]
    assert first["variables"] == SUPPORT["variables"]
    assert first["defaults"] == SUPPORT["defaults"]
    assert (first["note"], first["created_by"], first["template_id"]) == (
        "first draft",
        owner.user.email,
        template["id"],
    )
    listed = session_client.get(f"{URL}/support/versions").json()["results"]
    assert [v["version"] for v in listed] == [2, 1]
    assert session_client.get(f"{URL}/support/versions/2").json() == second
    assert_error(session_client.get(f"{URL}/support/versions/3"), 404, "not_found")
    assert session_client.get(f"{URL}/support").json()["latest_version"] == 2
    for method in ("put", "patch", "delete"):
        response = getattr(session_client, method)(f"{URL}/support/versions/1", SUPPORT, format="json")
        assert_error(response, 405, "method_not_allowed")
    assert PromptVersion.objects.get(number=2).defaults == {"model": "gpt-4o"}


def test_an_unbalanced_tag_is_refused_with_the_message_and_position(session_client):
    create_template(session_client)
    messages = [SUPPORT["messages"][0], {"role": "user", "content": "Question: {{question"}]

    error = assert_error(
        session_client.post(f"{URL}/support/versions", {**SUPPORT, "messages": messages}, format="json"),
        400,
        "validation_error",
    )

    assert error["fields"] == {"messages[1].content": ["'{{' is never closed by '}}' at position 10."]}
    assert PromptVersion.objects.count() == 0


@pytest.mark.parametrize(
    ("values", "field", "words"),
    [
        (
            {"variables": [{"name": "company"}, {"name": "language"}]},
            "variables",
            "'question', which is not declared",
        ),
        (
            {"variables": [*SUPPORT["variables"], {"name": "tone"}]},
            "variables",
            "'tone' is declared but not used",
        ),
        ({"variables": [*SUPPORT["variables"], {"name": "question"}]}, "variables[3].name", "declared twice"),
        ({"variables": [{"name": "1st"}]}, "variables[0].name", ""),
        ({"variables": [{"name": "company", "default": None}]}, "variables[0].default", ""),
        ({"variables": [{"name": "company", "default": ["a"]}]}, "variables[0].default", ""),
        ({"messages": []}, "messages", ""),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", ""),
        ({"messages": [{"role": "user", "content": "x", "name": "ada"}]}, "messages[0].name", ""),
        (
            {"messages": [{"role": "user", "content": "{{ user.name }}"}]},
            "messages[0].content",
            "not a variable",
        ),
        ({"defaults": {"stream": True}}, "defaults.stream", "Not a parameter"),
        ({"defaults": {"temperature": 3}}, "defaults.temperature", "from 0 to 2"),
        ({"defaults": {"temperature": "0.5"}}, "defaults.temperature", ""),
        ({"defaults": {"max_tokens": 0}}, "defaults.max_tokens", ""),
        ({"defaults": {"tools": [{"function": {}}]}}, "defaults.tools", ""),
        ({"defaults": []}, "defaults", ""),
        ({"version": 3}, "version", "Unknown field"),
    ],
)
def test_it_refuses_invalid_versions(session_client, values, field, words):
    create_template(session_client)

    error = assert_error(
        session_client.post(f"{URL}/support/versions", {**SUPPORT, **values}, format="json"),
        400,
        "validation_error",
    )

    assert field in error["fields"], error["fields"]
    assert words in " ".join(error["fields"][field])
    assert PromptVersion.objects.count() == 0


def test_labels_are_set_moved_removed_and_every_move_is_recorded(session_client, owner, template):
    path = f"{URL}/support/labels"

    staged = session_client.put(f"{path}/staging", {"version": 1}, format="json")
    moved = session_client.put(f"{path}/production", {"version": 1}, format="json")

    assert staged.status_code == moved.status_code == 200
    assert (staged.json()["name"], staged.json()["version"]) == ("staging", 1)
    assert moved.json()["version"] == 1
    assert {(label["name"], label["version"]) for label in session_client.get(path).json()["results"]} == {
        ("staging", 1),
        ("production", 1),
    }
    assert session_client.get(f"{URL}/support").json()["labels"] == {"production": 1, "staging": 1}
    assert (
        session_client.put(f"{path}/production", {"version": 1}, format="json").status_code == 200
    )  # no move
    assert session_client.delete(f"{path}/staging").status_code == 204
    assert_error(session_client.delete(f"{path}/staging"), 404, "not_found")

    production = session_client.get(f"{path}/production/history").json()["results"]
    staging = session_client.get(f"{path}/staging/history").json()["results"]
    assert [(m["from_version"], m["to_version"]) for m in production] == [(2, 1), (None, 2)]
    assert production[0]["moved_by"] == owner.user.email
    assert production[1]["moved_by"] is None  # set by a service call without a user
    assert production[0]["moved_at"].endswith("Z")
    assert [(m["from_version"], m["to_version"], m["label"]) for m in staging] == [
        (1, None, "staging"),
        (None, 1, "staging"),
    ]
    assert_error(session_client.get(f"{path}/never/history"), 404, "not_found")


@pytest.mark.parametrize(
    ("label", "body", "field"),
    [
        ("production", {"version": 9}, "version"),
        ("production", {"version": "1"}, "version"),
        ("production", {"version": True}, "version"),
        ("production", {}, "version"),
        ("latest", {"version": 1}, "label"),
        ("Prod", {"version": 1}, "label"),
        ("2", {"version": 1}, "label"),
    ],
)
def test_it_refuses_an_invalid_label(session_client, template, label, body, field):
    error = assert_error(
        session_client.put(f"{URL}/support/labels/{label}", body, format="json"), 400, "validation_error"
    )

    assert field in error["fields"], error["fields"]


def test_the_render_action_shows_what_a_version_renders(session_client, template):
    variables = {"language": "French", "question": "Where is {{company}}?"}

    production = session_client.post(f"{URL}/support/render", {"variables": variables}, format="json")
    first = session_client.post(
        f"{URL}/{template.id}/render", {"version": 1, "variables": variables}, format="json"
    )
    latest = session_client.post(
        f"{URL}/support/render",
        {"version": "latest", "variables": {**variables, "company": "Initech"}},
        format="json",
    )

    assert production.status_code == 200, production.content
    assert production.json() == {
        "template_id": str(template.id),
        "slug": "support",
        "version": 2,
        "label": "production",
        "messages": [
            {"role": "system", "content": "You are Acme's support agent. Answer in French."},
            {"role": "user", "content": "Where is {{company}}?"},
        ],
        "defaults": {"model": "gpt-4o-mini", "temperature": 0.2, "max_tokens": 300},
    }
    assert (first.json()["version"], first.json()["label"], first.json()["defaults"]["temperature"]) == (
        1,
        None,
        0.1,
    )
    assert latest.json()["messages"][0]["content"] == "You are Initech's support agent. Answer in French."


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"variables": {"language": "fr"}}, 400, "prompt_variable_missing"),
        ({"variables": {"language": "fr", "question": "q", "tone": "dry"}}, 400, "prompt_variable_unknown"),
        ({"version": "staging", "variables": {}}, 400, "prompt_not_found"),
        ({"version": 7, "variables": {}}, 400, "prompt_not_found"),
        ({"variables": {"language": "fr", "question": None}}, 400, "invalid_prompt"),
        ({"variables": {"language": "fr", "question": {"a": 1}}}, 400, "invalid_prompt"),
        ({"variables": ["fr"]}, 400, "validation_error"),
        ({"version": 1.5}, 400, "validation_error"),
        ({"version": None}, 400, "validation_error"),
        ({"model": "gpt-4o"}, 400, "validation_error"),
    ],
)
def test_the_render_action_names_what_is_wrong(session_client, template, body, status, code):
    error = assert_error(session_client.post(f"{URL}/support/render", body, format="json"), status, code)

    if code.startswith("prompt_"):
        assert "support" in error["message"] or "'" in error["message"]


def test_members_read_and_render_and_only_admins_and_owners_write(organization, client_for, template):
    member, admin = client_for(organization, "member"), client_for(organization, "admin")
    variables = {"variables": {"language": "fr", "question": "q"}}

    assert member.get(URL).status_code == 200
    assert member.get(f"{URL}/support/versions/1").status_code == 200
    assert member.get(f"{URL}/support/labels/production/history").status_code == 200
    assert member.post(f"{URL}/support/render", variables, format="json").status_code == 200
    assert_error(member.post(URL, {"slug": "m", "name": "m"}, format="json"), 403, "permission_denied")
    assert_error(member.patch(f"{URL}/support", {"name": "m"}, format="json"), 403, "permission_denied")
    assert_error(member.delete(f"{URL}/support"), 403, "permission_denied")
    assert_error(member.post(f"{URL}/support/versions", SUPPORT, format="json"), 403, "permission_denied")
    assert_error(
        member.put(f"{URL}/support/labels/production", {"version": 1}, format="json"),
        403,
        "permission_denied",
    )
    assert_error(member.delete(f"{URL}/support/labels/production"), 403, "permission_denied")
    assert admin.post(f"{URL}/support/versions", SUPPORT, format="json").status_code == 201
    assert admin.put(f"{URL}/support/labels/production", {"version": 3}, format="json").status_code == 200


def test_another_organizations_template_is_invisible_by_id_and_by_slug(session_client, outsiders_template):
    variables = {"variables": {"language": "fr", "question": "q"}}

    assert session_client.get(URL).json()["results"] == []
    for reference in (str(outsiders_template.id), "support"):
        base = f"{URL}/{reference}"
        assert_error(session_client.get(base), 404, "not_found")
        assert_error(session_client.patch(base, {"name": "mine"}, format="json"), 404, "not_found")
        assert_error(session_client.get(f"{base}/versions"), 404, "not_found")
        assert_error(session_client.get(f"{base}/versions/1"), 404, "not_found")
        assert_error(session_client.post(f"{base}/versions", SUPPORT, format="json"), 404, "not_found")
        assert_error(session_client.get(f"{base}/labels"), 404, "not_found")
        assert_error(
            session_client.put(f"{base}/labels/production", {"version": 1}, format="json"), 404, "not_found"
        )
        assert_error(session_client.delete(f"{base}/labels/production"), 404, "not_found")
        assert_error(session_client.get(f"{base}/labels/production/history"), 404, "not_found")
        assert_error(session_client.post(f"{base}/render", variables, format="json"), 404, "not_found")
        assert_error(session_client.delete(base), 404, "not_found")
    outsiders_template.refresh_from_db()
    assert outsiders_template.name == "Support"
    assert outsiders_template.versions.count() == 1
    assert PromptLabelMove.objects.filter(template=outsiders_template).count() == 1


def test_the_same_slug_in_two_organizations_names_each_ones_own(session_client, outsiders_template):
    mine = create_template(session_client)

    assert session_client.get(f"{URL}/support").json()["id"] == mine["id"] != str(outsiders_template.id)
