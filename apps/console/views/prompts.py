"""Prompt templates: the list, create, a template's page (its versions, each with a publish-to-label
action, its labels with their move history, a new version with an optional label to publish it to,
edit and delete: versions are immutable, a change is always a new one), a version's page, and the
render preview (what a version renders with some variables, exactly as the proxy would, without
calling a model; members may use it, as the API's render action).

Input is checked by the API's serializers and written through the API's services, which move the
organization's configuration generation (a label move is served from the next request)."""

import json

from django.contrib import messages
from django.db.models import Max, Prefetch
from django.http import QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.views.decorators.cache import never_cache

from apps.console.access import Console, console_view
from apps.console.forms import check, digits, service_errors, text
from apps.core.errors import GatewayError
from apps.organizations.models import Role
from apps.prompts import selectors, services
from apps.prompts.api.serializers import (
    LabelSetSerializer,
    RenderSerializer,
)
from apps.prompts.compiled import DEFAULT_LABEL, LATEST
from apps.prompts.inputs import DEFAULT_PARAMETERS, ROLES
from apps.prompts.models import PromptLabel, PromptTemplate, PromptVersion
from apps.prompts.rendering import TemplateSyntaxError, compile_text

# Labels offered when setting one (any other valid name may be typed).
SUGGESTED_LABELS = ("production", "staging")
# Blank message rows a new version's form offers after the copied ones.
BLANK_ROWS = 1


def _templates(console: Console):
    labels = PromptLabel.objects.select_related("version").order_by("name")
    return (
        selectors.templates_of(console.organization.id)
        .prefetch_related(Prefetch("labels", queryset=labels))
        .annotate(latest_version=Max("versions__number"))
        .order_by("slug")
    )


def _template(console: Console, template_id) -> PromptTemplate:
    return get_object_or_404(_templates(console), pk=template_id)


def _versions(template: PromptTemplate):
    return template.versions.select_related("created_by").order_by("-number")


def _template_input(post: QueryDict) -> dict:
    return {
        "slug": post.get("slug", "").strip(),
        "name": post.get("name", "").strip(),
        "description": post.get("description", "").replace("\r\n", "\n").strip(),
    }


# --- Templates ------------------------------------------------------------------------------------


@console_view()
def prompt_list(request, console: Console):
    return render(
        request, "console/prompts/list.html", {"console": console, "templates": _templates(console)}
    )


@console_view(role=Role.ADMIN, methods=("GET", "POST"))
def prompt_create(request, console: Console):
    errors: dict = {}
    status = 400
    if request.method == "POST":
        try:
            template = services.template_create(
                organization=console.organization, data=_template_input(request.POST)
            )
        except GatewayError as error:
            errors, status = service_errors(error), error.status
        else:
            messages.success(request, f"Created {template.slug}; now write its first version.")
            return redirect(_new_version_anchor(template))
    return render(
        request,
        "console/prompts/form.html",
        {"console": console, "errors": errors, "form": request.POST if request.method == "POST" else None},
        status=status if errors else 200,
    )


def _new_version_anchor(template: PromptTemplate) -> str:
    return f"{reverse('console:prompt', kwargs={'template_id': template.id})}#new-version"


def _detail(
    request,
    console: Console,
    template: PromptTemplate,
    *,
    errors=None,
    form=None,
    version_post: QueryDict | None = None,
    status=400,
):
    """The template's page; ``version_post``: a refused new version, shown again in its form."""
    versions = list(_versions(template))
    labels = list(template.labels.all())
    labels_of: dict[int, list[str]] = {}
    for label in labels:
        labels_of.setdefault(label.version.number, []).append(label.name)
    names = [label.name for label in labels]
    return render(
        request,
        "console/prompts/detail.html",
        {
            "console": console,
            "template": template,
            "versions": [(version, labels_of.get(version.number, [])) for version in versions],
            "version_numbers": [version.number for version in versions],
            "labels": labels,
            "moves": selectors.label_moves_of(template)[:200],
            "label_choices": names + [name for name in SUGGESTED_LABELS if name not in names],
            # What a version row's publish field holds: production while it is unset or in use,
            # otherwise the label the template already uses.
            "publish_default": DEFAULT_LABEL if not names or DEFAULT_LABEL in names else names[0],
            **_version_form(versions[0] if versions else None, version_post),
            "version_refused": version_post is not None,
            "errors": errors or {},
            "form": form,
        },
        status=status if errors else 200,
    )


@console_view()
def prompt_detail(request, console: Console, template_id):
    return _detail(request, console, _template(console, template_id))


@console_view(role=Role.ADMIN, methods=("POST",))
def prompt_update(request, console: Console, template_id):
    template = _template(console, template_id)
    try:
        services.template_update(template=template, data=_template_input(request.POST))
    except GatewayError as error:
        errors, status = service_errors(error), error.status
    else:
        messages.success(request, f"Saved {template.slug}.")
        return redirect("console:prompt", template_id=template.id)
    return _detail(
        request, console, _template(console, template_id), errors=errors, form=request.POST, status=status
    )


@console_view(role=Role.ADMIN, methods=("POST",))
def prompt_delete(request, console: Console, template_id):
    template = _template(console, template_id)
    services.template_delete(template=template)
    messages.success(request, f"Deleted {template.slug} with its versions, labels and their history.")
    return redirect("console:prompts")


# --- Versions -------------------------------------------------------------------------------------


def _rows(post: QueryDict) -> list[dict]:
    """The message rows of the form (role, content), as typed (blank ones included)."""
    roles, contents = post.getlist("role"), post.getlist("content")
    return [
        {"role": role, "content": content.replace("\r\n", "\n")}
        for role, content in zip(roles, contents, strict=False)
    ]


def _variables(post: QueryDict, used_messages: list[dict]) -> list[dict]:
    """``name`` or ``name=default`` per line; left empty, exactly the variables the messages use
    (in their order, without defaults)."""
    lines = [line.strip() for line in post.get("variables", "").splitlines() if line.strip()]
    if not lines:
        names: list[str] = []
        for message in used_messages:
            try:
                names.extend(name for name in compile_text(message["content"]).names if name not in names)
            except TemplateSyntaxError:
                continue  # the service names the malformed tag
        return [{"name": name} for name in names]
    variables = []
    for line in lines:
        name, has_default, default = line.partition("=")
        variable = {"name": name.strip()}
        if has_default:
            variable["default"] = default.strip()
        variables.append(variable)
    return variables


def _version_input(post: QueryDict) -> tuple[dict, dict]:
    errors: dict = {}
    message_rows = [row for row in _rows(post) if row["content"].strip()]
    data: dict = {"messages": message_rows, "variables": _variables(post, message_rows)}
    defaults = post.get("defaults", "").strip()
    if defaults:
        try:
            data["defaults"] = json.loads(defaults)
        except (ValueError, RecursionError) as error:
            errors["defaults"] = [f"Not valid JSON: {error}."]
    note = text(post, "note")
    if note is not None:
        data["note"] = note
    return data, errors


def _variables_text(variables: list[dict]) -> str:
    return "\n".join(
        f"{variable['name']}={variable['default']}" if "default" in variable else variable["name"]
        for variable in variables
    )


def _version_form(latest: PromptVersion | None, post: QueryDict | None) -> dict:
    """The new-version form of a template's page: a refused post as it was typed, otherwise a copy
    of the latest version; the label to publish to starts as production for a first version."""
    if post is not None:
        rows = _rows(post)
        version_form = {
            "variables": post.get("variables", ""),
            "defaults": post.get("defaults", ""),
            "note": post.get("note", ""),
            "label": post.get("label", ""),
        }
    else:
        rows = [dict(message) for message in latest.messages] if latest else []
        version_form = {
            "variables": _variables_text(latest.variables) if latest else "",
            "defaults": json.dumps(latest.defaults, indent=2) if latest and latest.defaults else "",
            "note": "",
            "label": "" if latest else DEFAULT_LABEL,
        }
    rows = [row for row in rows if row["content"].strip()] or [{"role": "system", "content": ""}]
    rows += [{"role": "user", "content": ""}] * BLANK_ROWS
    return {
        "latest": latest,
        "rows": rows,
        "roles": ROLES,
        "parameters": DEFAULT_PARAMETERS,
        "version_form": version_form,
    }


@console_view(role=Role.ADMIN, methods=("GET", "POST"))
def version_create(request, console: Console, template_id):
    """Saves the form on the template's page as its next version, published to the label it names
    (if any) in the same write. A GET goes to that form."""
    template = _template(console, template_id)
    if request.method == "GET":
        return redirect(_new_version_anchor(template))
    data, errors = _version_input(request.POST)
    label = text(request.POST, "label")
    status = 400
    if not errors:
        try:
            version = services.version_create(
                template=template, data=data, created_by=console.user, label=label
            )
        except GatewayError as error:
            errors, status = service_errors(error), error.status
        else:
            if label is None:
                done = f"Created version {version.number}; publish it to a label for requests to get it."
            else:
                done = f"Created version {version.number} and published it to {label}: requests get it now."
            messages.success(request, done)
            # The new version's row: a refused form came back at the form (its action's fragment).
            page = reverse("console:prompt", kwargs={"template_id": template.id})
            return redirect(f"{page}#version-{version.number}")
    return _detail(request, console, template, errors=errors, version_post=request.POST, status=status)


def _version(template: PromptTemplate, number: int) -> PromptVersion:
    return get_object_or_404(_versions(template), number=number)


@console_view()
def version_detail(request, console: Console, template_id, number: int):
    template = _template(console, template_id)
    version = _version(template, number)
    names = [label.name for label in template.labels.all()]
    return render(
        request,
        "console/prompts/version.html",
        {
            "console": console,
            "template": template,
            "version": version,
            "labels": [label.name for label in template.labels.all() if label.version_id == version.id],
            "label_choices": names + [name for name in SUGGESTED_LABELS if name not in names],
        },
    )


# --- Labels ---------------------------------------------------------------------------------------


def _version_number(value: str | None):
    """The form's version as the API takes it: a whole number (text that is none is left for the
    serializer to refuse)."""
    if value is None:
        return None
    value = value.strip()
    number = digits(value, max_digits=9)
    return value if number is None else number


@console_view(role=Role.ADMIN, methods=("POST",))
def label_set(request, console: Console, template_id):
    """Sets a label or moves it to a version; the move is recorded with who made it."""
    template = _template(console, template_id)
    name = request.POST.get("label", "").strip()
    data, errors = check(LabelSetSerializer, {"version": _version_number(text(request.POST, "version"))})
    if data is not None:
        try:
            label = services.label_set(
                template=template, name=name, version=data["version"], user=console.user
            )
        except GatewayError as error:
            errors = service_errors(error)
        else:
            messages.success(
                request, f"{label.name} points at version {data['version']} from the next request on."
            )
            if request.POST.get("back") == "version":  # published from the version's own page
                return redirect("console:prompt-version", template_id=template.id, number=data["version"])
            return redirect("console:prompt", template_id=template.id)
    return _detail(request, console, template, errors=errors, form=request.POST)


@console_view(role=Role.ADMIN, methods=("POST",))
def label_delete(request, console: Console, template_id, label: str):
    template = _template(console, template_id)
    found = get_object_or_404(template.labels.select_related("version", "template"), name=label)
    services.label_delete(label=found, user=console.user)
    messages.success(request, f"Removed {label}; requests naming it now answer prompt_not_found.")
    return redirect("console:prompt", template_id=template.id)


# --- Render preview -------------------------------------------------------------------------------


def _resolve(template: PromptTemplate, reference: str | None) -> PromptVersion | None:
    """The version a reference names: a number, a label, ``latest``; by default ``production`` (or
    the newest version while no label says otherwise)."""
    versions = template.versions.all()
    if reference is None:
        label = template.labels.filter(name=DEFAULT_LABEL).select_related("version").first()
        return label.version if label is not None else versions.order_by("-number").first()
    if (number := digits(reference, max_digits=9)) is not None:
        return versions.filter(number=number).first()
    if reference == LATEST:
        return versions.order_by("-number").first()
    label = template.labels.filter(name=reference).select_related("version").first()
    return label.version if label is not None else None


@never_cache
@console_view(methods=("GET", "POST"))
def prompt_render(request, console: Console, template_id):
    """GET: the form for a version (``?version=``, default production); POST: its rendering."""
    template = _template(console, template_id)
    source = request.POST if request.method == "POST" else request.GET
    reference = text(source, "version")
    version = _resolve(template, reference)
    errors: dict = {}
    rendered = None
    status = 200
    if version is None and template.versions.exists():
        errors = {"version": [f"This template has no version or label '{reference}'."]}
        status = 400
    if request.method == "POST" and version is not None:
        variables = {
            variable["name"]: request.POST[f"var_{variable['name']}"]
            for variable in version.variables
            if request.POST.get(f"var_{variable['name']}", "") != ""
        }
        data, errors = check(
            RenderSerializer, {"version": reference or version.number, "variables": variables}
        )
        if data is not None:
            try:
                rendered = selectors.template_render(template, **data)
            except GatewayError as error:
                errors = service_errors(error)
        status = 400 if errors else 200
    context = {
        "console": console,
        "template": template,
        "version": version,
        "reference": reference or "",
        "choices": _choices(template),
        "fields": [
            {**variable, "value": request.POST.get(f"var_{variable['name']}", "")}
            for variable in (version.variables if version is not None else [])
        ],
        "rendered": rendered,
        "errors": errors,
    }
    if request.headers.get("HX-Request") == "true":
        # htmx swaps only 2xx answers: the result (or the errors) goes in place with a 200.
        return render(request, "console/prompts/_rendered.html", context)
    return render(request, "console/prompts/render.html", context, status=status)


def _choices(template: PromptTemplate) -> list[tuple[str, str]]:
    """(value, text) of the version picker: labels first, then every number, newest first."""
    labels = [
        (label.name, f"{label.name} (version {label.version.number})") for label in template.labels.all()
    ]
    numbers = [
        (str(number), f"version {number}")
        for number in template.versions.order_by("-number").values_list("number", flat=True)
    ]
    return labels + numbers


urlpatterns = [
    path("prompts/", prompt_list, name="prompts"),
    path("prompts/new", prompt_create, name="prompt-create"),
    path("prompts/<uuid:template_id>/", prompt_detail, name="prompt"),
    path("prompts/<uuid:template_id>/edit", prompt_update, name="prompt-update"),
    path("prompts/<uuid:template_id>/delete", prompt_delete, name="prompt-delete"),
    path("prompts/<uuid:template_id>/versions/new", version_create, name="prompt-version-create"),
    path("prompts/<uuid:template_id>/versions/<int:number>/", version_detail, name="prompt-version"),
    path("prompts/<uuid:template_id>/labels/", label_set, name="prompt-label-set"),
    path("prompts/<uuid:template_id>/labels/<str:label>/delete", label_delete, name="prompt-label-delete"),
    path("prompts/<uuid:template_id>/render", prompt_render, name="prompt-render"),
]
