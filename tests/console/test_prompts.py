"""The console's prompt template pages: list, create, a template's versions (new ones only; never
edited), labels with their history, the render preview; roles, tenancy, CSRF and refused input."""

import re

import pytest

from apps.prompts import services
from apps.prompts.models import PromptLabelMove, PromptTemplate, PromptVersion
from tests.console.conftest import csrf_token, post_form
from tests.management.generations import bumps_generation
from tests.prompts.conftest import make_template

pytestmark = pytest.mark.django_db

LIST = "/console/prompts/"
NEW = "/console/prompts/new"


def page_of(template) -> str:
    return f"/console/prompts/{template.id}/"


def test_a_member_reads_templates_versions_and_labels_and_never_another_organizations(
    console_for, organization, outsider
):
    template = make_template(organization, "support", versions=2)
    make_template(outsider.organization, "their-template")
    client = console_for(organization, "member")
    listing = client.get(LIST).content.decode()
    assert "support" in listing and "production → 2" in listing
    assert "their-template" not in listing and "Create a template" not in listing
    page = client.get(page_of(template)).content.decode()
    assert "Label history" in page and "New version" not in page and "Set label" not in page
    version = client.get(f"{page_of(template)}versions/1/").content.decode()
    assert "You are {{company}}&#x27;s support agent." in version
    assert "&quot;temperature&quot;: 0.1" in version


def test_an_admin_creates_a_template_then_its_first_version(console_for, organization):
    client = console_for(organization, "admin")
    response = post_form(
        client, NEW, NEW, {"slug": "triage", "name": "Triage", "description": "Sorts tickets."}
    )
    template = PromptTemplate.objects.get(organization=organization, slug="triage")
    assert response.status_code == 302
    assert response["Location"] == f"{page_of(template)}#new-version"
    page = client.get(page_of(template)).content.decode()
    assert "This will be version 1." in page and "Write the first version below and publish it" in page
    publish = 'name="label" list="label-names" maxlength="64" placeholder="leave empty to publish later"'
    assert f'{publish} value="production"' in page  # a first version is offered for production
    form = f"{page_of(template)}versions/new"
    response = post_form(
        client,
        page_of(template),
        form,
        {
            "role": ["system", "user", "user"],
            "content": ["You triage for {{ team }}.\r\nBe brief.", "{{ticket}}", "  "],
            "variables": "",  # declared for us: team, ticket
            "defaults": '{"model": "gpt-4o-mini", "temperature": 0}',
            "note": "first cut",
        },
    )
    assert response.status_code == 302
    version = PromptVersion.objects.get(template=template)
    assert response["Location"] == f"{page_of(template)}#version-1"
    assert not template.labels.exists()  # the label field was left empty: saved, not published
    assert version.number == 1 and version.note == "first cut"
    assert version.messages == [
        {"role": "system", "content": "You triage for {{ team }}.\nBe brief."},
        {"role": "user", "content": "{{ticket}}"},
    ]
    assert version.variables == [{"name": "team"}, {"name": "ticket"}]
    assert version.defaults == {"model": "gpt-4o-mini", "temperature": 0}
    assert version.created_by == client.membership.user


def test_a_new_version_starts_from_the_latest_and_leaves_it_unchanged(
    console_for, organization, django_capture_on_commit_callbacks
):
    template = make_template(organization, versions=1)
    client = console_for(organization, "admin")
    form = f"{page_of(template)}versions/new"
    page = client.get(page_of(template)).content.decode()
    assert "{{question}}</textarea>" in page and "company=Acme" in page and "Copied from version 1" in page
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(
            client,
            page_of(template),
            form,
            {
                "role": ["system", "user"],
                "content": ["You help {{company}} customers.", "{{question}}"],
                "variables": "company=Globex\nquestion",
                "defaults": "",
            },
        )
    assert response.status_code == 302
    first, second = PromptVersion.objects.filter(template=template).order_by("number")
    assert first.messages[0]["content"].startswith("You are {{company}}")
    assert second.number == 2 and second.variables == [
        {"name": "company", "default": "Globex"},
        {"name": "question"},
    ]
    assert second.defaults == {}
    # There is no way to change a version: its page takes no post.
    version_page = f"{page_of(template)}versions/1/"
    assert post_form(client, page_of(template), version_page, {"content": "x"}).status_code == 405


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"content": ["Hi {{name"]}, "never closed by"),
        ({"content": ["Hi {{ user.name }}"]}, "is not a variable"),
        ({"content": ["Hi {{name}}"], "variables": "name\nunused"}, "declared but not used"),
        ({"content": ["Hi"], "defaults": "{model: x}"}, "Not valid JSON"),
        ({"content": ["Hi"], "defaults": '{"stream": true}'}, "Not a parameter a version may set"),
        ({"content": ["Hi"], "defaults": '{"temperature": 9}'}, "A number from 0 to 2"),
        ({"content": ["  "]}, "messages"),
    ],
)
def test_a_refused_version_says_why_and_saves_nothing(console_for, organization, data, says):
    template = services.template_create(organization=organization, data={"slug": "t", "name": "T"})
    client = console_for(organization, "admin")
    form = f"{page_of(template)}versions/new"
    response = post_form(client, page_of(template), form, {"role": ["user"] * len(data["content"]), **data})
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not PromptVersion.objects.exists()


def test_a_refused_template_says_why(console_for, organization):
    make_template(organization, "support")
    client = console_for(organization, "admin")
    response = post_form(client, NEW, NEW, {"slug": "Not A Slug", "name": "x"})
    assert response.status_code == 400 and "does not match the required pattern" in response.content.decode()
    response = post_form(client, NEW, NEW, {"slug": "support", "name": "again"})
    assert response.status_code == 409 and "exists already" in response.content.decode()
    assert PromptTemplate.objects.count() == 1


def test_labels_are_set_moved_and_removed_with_their_history(
    console_for, organization, django_capture_on_commit_callbacks
):
    template = make_template(organization, versions=3, label=None)
    client = console_for(organization, "admin")
    page = page_of(template)
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(client, page, f"{page}labels/", {"label": "production", "version": "2"})
    assert response.status_code == 302
    post_form(client, page, f"{page}labels/", {"label": "production", "version": "3"})
    post_form(client, page, f"{page}labels/", {"label": "staging", "version": "1"})
    assert dict(template.labels.values_list("name", "version__number")) == {"production": 3, "staging": 1}
    response = post_form(client, page, f"{page}labels/staging/delete", {})
    assert response.status_code == 302
    moves = list(
        PromptLabelMove.objects.filter(template=template)
        .order_by("created_at")
        .values_list("label", "from_version", "to_version", "moved_by")
    )
    user = client.membership.user.id
    assert moves == [
        ("production", None, 2, user),
        ("production", 2, 3, user),
        ("staging", None, 1, user),
        ("staging", 1, None, user),
    ]
    html = client.get(page).content.decode()
    assert html.count(client.membership.user.email) >= 4 and "removed" in html


def test_one_page_saves_a_version_and_publishes_it_to_a_label(
    console_for, organization, django_capture_on_commit_callbacks
):
    template = make_template(organization, versions=1)  # production -> 1
    client = console_for(organization, "admin")
    page = page_of(template)
    assert client.get(f"{page}versions/new")["Location"] == f"{page}#new-version"
    html = client.get(page).content.decode()
    assert 'id="new-version"' in html and "Publish to label" in html
    assert '<option value="production"><option value="staging">' in html  # the labels offered
    fields = {
        "role": ["system", "user"],
        "content": ["You help {{company}} customers.", "{{question}}"],
        "variables": "company=Globex\nquestion",
        "note": "friendlier",
    }
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(client, page, f"{page}versions/new", {**fields, "label": "production"})
    assert response.status_code == 302 and response["Location"] == f"{page}#version-2"
    assert dict(template.labels.values_list("name", "version__number")) == {"production": 2}
    move = PromptLabelMove.objects.filter(template=template).latest("created_at")
    assert (move.label, move.from_version, move.to_version, move.moved_by) == (
        "production",
        1,
        2,
        client.membership.user,
    )
    html = client.get(page).content.decode()
    assert "Created version 2 and published it to production" in html
    assert '<td class="num"><a href="/console/prompts/' in html and "<code>production</code>" in html

    refused = post_form(client, page, f"{page}versions/new", {**fields, "label": "Prod!"})
    assert refused.status_code == 400
    html = refused.content.decode()
    assert "Lowercase letters" in html and 'value="Prod!"' in html and "friendlier" in html
    assert template.versions.count() == 2  # a refused label saves no version either
    assert dict(template.labels.values_list("name", "version__number")) == {"production": 2}


def test_each_version_row_publishes_in_place_and_an_unpublished_version_says_how(console_for, organization):
    template = make_template(organization, versions=2, label=None)
    client = console_for(organization, "admin")
    page = page_of(template)
    html = client.get(page).content.decode()
    assert "Nothing is published yet" in html and "Publish a version from its row below" in html
    publish = 'name="label" list="label-names" required maxlength="64" size="10" value="production"'
    assert html.count(publish) == 2  # a publish action on each version's row
    response = post_form(client, page, f"{page}labels/", {"label": "production", "version": "1"})
    assert response.status_code == 302 and response["Location"] == page
    row = re.search(r'<tr id="version-1">.*?</tr>', client.get(page).content.decode(), re.S).group(0)
    assert "<code>production</code>" in row

    version_page = f"{page}versions/2/"
    html = client.get(version_page).content.decode()
    assert "Not published: requests get this version only by its number" in html and "<dd>none" not in html
    response = post_form(
        client, version_page, f"{page}labels/", {"label": "production", "version": "2", "back": "version"}
    )
    assert response.status_code == 302 and response["Location"] == version_page
    assert dict(template.labels.values_list("name", "version__number")) == {"production": 2}
    assert "<dd><code>production</code> </dd>" in client.get(version_page).content.decode()


def test_a_member_sees_no_publish_action(console_for, organization):
    template = make_template(organization, versions=2, label=None)
    client = console_for(organization, "member")
    for path in (page_of(template), f"{page_of(template)}versions/1/"):
        html = client.get(path).content.decode()
        assert "Publish a version" not in html and "Publish</button>" not in html
        assert "Publish to this label" not in html and 'name="label"' not in html


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"label": "Prod!", "version": "1"}, "Lowercase letters"),
        ({"label": "latest", "version": "1"}, "always means the newest version"),
        ({"label": "production", "version": "9"}, "This template has no version 9."),
        ({"label": "production", "version": "two"}, "version"),
    ],
)
def test_a_refused_label_says_why_and_moves_nothing(console_for, organization, data, says):
    template = make_template(organization, versions=2, label=None)
    client = console_for(organization, "admin")
    response = post_form(client, page_of(template), f"{page_of(template)}labels/", data)
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not template.labels.exists() and not PromptLabelMove.objects.exists()


def test_a_member_renders_a_preview_without_a_model_call(console_for, organization):
    template = make_template(organization, versions=2)
    client = console_for(organization, "member")
    render = f"{page_of(template)}render"
    form = client.get(render).content.decode()
    assert "Version 2" in form and 'name="var_question"' in form and "empty: the default, Acme" in form
    response = post_form(
        client, render, render, {"version": "production", "var_language": "French", "var_question": "Où?"}
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "You are Acme&#x27;s support agent. Answer in French." in page
    assert "<pre>Où?</pre>" in page and "&quot;temperature&quot;: 0.2" in page
    # An older version by number.
    response = post_form(
        client, render, render, {"version": "1", "var_language": "German", "var_question": "?"}
    )
    assert "&quot;temperature&quot;: 0.1" in response.content.decode()


def test_a_render_without_a_required_variable_says_which(console_for, organization):
    template = make_template(organization)
    client = console_for(organization, "member")
    render = f"{page_of(template)}render"
    response = post_form(client, render, render, {"version": "production", "var_question": "?"})
    assert response.status_code == 400
    assert "language" in response.content.decode() and "Not rendered" in response.content.decode()
    token = csrf_token(client, render)
    htmx = client.post(
        render,
        {"version": "production", "var_language": "en", "var_question": "Hi", "csrfmiddlewaretoken": token},
        headers={"HX-Request": "true"},
    )
    assert htmx.status_code == 200 and "<html" not in htmx.content.decode()
    assert "Answer in en." in htmx.content.decode()


def test_a_render_of_an_unknown_version_or_label_is_refused(console_for, organization):
    template = make_template(organization)
    client = console_for(organization, "member")
    response = client.get(f"{page_of(template)}render?version=canary")
    assert response.status_code == 400 and "no version or label" in response.content.decode()


def test_an_admin_edits_and_deletes_a_template(console_for, organization):
    template = make_template(organization)
    client = console_for(organization, "admin")
    page = page_of(template)
    response = post_form(
        client, page, f"{page}edit", {"slug": "helpdesk", "name": "Helpdesk", "description": ""}
    )
    assert response.status_code == 302
    template.refresh_from_db()
    assert (template.slug, template.name) == ("helpdesk", "Helpdesk")
    response = post_form(client, page, f"{page}delete", {})
    assert response.status_code == 302 and not PromptTemplate.objects.exists()


@pytest.mark.parametrize(
    ("path", "data"),
    [
        (NEW, {"slug": "sneaky", "name": "x"}),
        ("{page}edit", {"slug": "renamed", "name": "x"}),
        ("{page}delete", {}),
        ("{page}versions/new", {"role": ["user"], "content": ["x"]}),
        ("{page}labels/", {"label": "production", "version": "1"}),
        ("{page}labels/production/delete", {}),
    ],
)
def test_a_member_is_refused_every_change_on_the_server(console_for, organization, path, data):
    template = make_template(organization, versions=2)
    client = console_for(organization, "member")
    response = post_form(client, LIST, path.format(page=page_of(template)), data)
    assert response.status_code == 403
    template.refresh_from_db()
    assert template.slug == "support" and template.versions.count() == 2
    assert dict(template.labels.values_list("name", "version__number")) == {"production": 2}
    assert PromptTemplate.objects.count() == 1


@pytest.mark.parametrize(
    "suffix",
    ["", "edit", "delete", "versions/new", "versions/1/", "labels/", "labels/production/delete", "render"],
)
def test_another_organizations_template_answers_404(console_for, organization, outsider, suffix):
    theirs = make_template(outsider.organization, "theirs")
    client = console_for(organization, "owner")
    path = f"{page_of(theirs)}{suffix}"
    data = {
        "slug": "mine",
        "name": "x",
        "label": "production",
        "version": "1",
        "role": ["user"],
        "content": ["x"],
    }
    response = (
        client.get(path) if suffix in ("", "versions/1/", "render") else post_form(client, LIST, path, data)
    )
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.slug == "theirs" and theirs.versions.count() == 1


def test_a_post_without_the_csrf_token_is_refused(console_for, organization):
    template = make_template(organization)
    client = console_for(organization, "owner")
    response = client.post(f"{page_of(template)}delete", {})
    assert response.status_code == 403
    assert PromptTemplate.objects.filter(id=template.id).exists()
