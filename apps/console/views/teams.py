"""Teams: list, create, edit (name, slug, data regions, cache, budget and rate limits), members (users
of the organization added to and removed from a team), usage (spend and what is left of the budget),
delete (refused while active API keys are bound to the team).

Members read the teams and their members, and the usage of the teams they belong to (as the API's
``may_read_team_usage``); admins and owners change and read every team's usage.
"""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.utils import timezone

from apps.console.access import Console, console_view
from apps.console.forms import (
    choice_flag,
    labels,
    limits_input,
    service_errors,
    text,
    whole,
)
from apps.core.errors import GatewayError
from apps.limits.api.serializers import attached_limits
from apps.limits.models import BudgetPeriod, Scope
from apps.limits.usage import usage_of
from apps.organizations.models import Role
from apps.teams import selectors, services
from apps.teams.models import Team


def _form_context(console: Console, **extra) -> dict:
    return {"console": console, "periods": BudgetPeriod.values, **extra}


def _team_input(post, *, creating: bool) -> dict:
    data = {
        "name": post.get("name", "").strip(),
        "slug": post.get("slug", "").strip(),
        "allowed_data_regions": labels(post, "allowed_data_regions"),
        "allowed_models": labels(post, "allowed_models"),
        "cache_enabled": choice_flag(post, "cache_enabled"),
        "cache_ttl_seconds": whole(post, "cache_ttl_seconds"),
        **limits_input(post),
    }
    if creating and not data["slug"]:
        del data["slug"]  # made from the name
    return data


@console_view()
def team_list(request, console: Console):
    mine = selectors.team_ids_of(user=console.user, organization_id=console.organization.id)
    teams = [(team, team.id in mine) for team in selectors.teams_of(console.organization.id)]
    return render(request, "console/teams/list.html", {"console": console, "teams": teams})


@console_view(role=Role.ADMIN, methods=("GET", "POST"))
def team_create(request, console: Console):
    errors: dict = {}
    status = 200
    if request.method == "POST":
        try:
            team = services.team_create(
                organization=console.organization, data=_team_input(request.POST, creating=True)
            )
        except GatewayError as error:
            errors, status = service_errors(error), error.status
        else:
            messages.success(request, f"Created the team {team.name} ({team.slug}).")
            return redirect("console:team", team_id=team.id)
    return render(
        request,
        "console/teams/form.html",
        _form_context(console, errors=errors, form=request.POST, limits=None),
        status=status,
    )


def _team(console: Console, team_id) -> Team:
    return get_object_or_404(selectors.teams_of(console.organization.id), pk=team_id)


def may_read_usage(console: Console, team: Team) -> bool:
    return selectors.may_read_team_usage(membership=console.membership, team_id=team.id)


def _detail(request, console: Console, team: Team, *, failed="", errors=None, form=None, status=200):
    """``failed``: the form whose errors are shown (edit, members or delete)."""
    usage = None
    if may_read_usage(console, team):
        usage = usage_of(
            organization=console.organization,
            scope=Scope.TEAM,
            scope_id=team.id,
            limits=attached_limits(team),
            now=timezone.now(),
        )
    return render(
        request,
        "console/teams/detail.html",
        _form_context(
            console,
            team=team,
            limits=attached_limits(team),
            usage=usage,
            members=selectors.team_members(team).order_by("user__email"),
            candidates=selectors.team_member_candidates(team) if console.can_change else (),
            api_keys=team.api_keys.filter(is_active=True).count(),
            failed=failed,
            errors=errors or {},
            form=form,
        ),
        status=status,
    )


@console_view()
def team_detail(request, console: Console, team_id):
    return _detail(request, console, _team(console, team_id))


@console_view(role=Role.ADMIN, methods=("POST",))
def team_update(request, console: Console, team_id):
    team = _team(console, team_id)
    try:
        services.team_update(team=team, data=_team_input(request.POST, creating=False))
    except GatewayError as error:
        errors, status = service_errors(error), error.status
    else:
        messages.success(request, f"Saved {team.name}.")
        return redirect("console:team", team_id=team.id)
    # Read again: a refused change may have been applied to the instance before it was refused.
    return _detail(
        request,
        console,
        _team(console, team_id),
        failed="edit",
        errors=errors,
        form=request.POST,
        status=status,
    )


@console_view(role=Role.ADMIN, methods=("POST",))
def team_delete(request, console: Console, team_id):
    team = _team(console, team_id)
    try:
        services.team_delete(team=team)
    except GatewayError as error:
        return _detail(
            request, console, team, failed="delete", errors=service_errors(error), status=error.status
        )
    messages.success(request, f"Deleted the team {team.name}.")
    return redirect("console:teams")


@console_view(role=Role.ADMIN, methods=("POST",))
def team_member_add(request, console: Console, team_id):
    team = _team(console, team_id)
    user_id, email = text(request.POST, "user_id"), text(request.POST, "email")
    data = {"user_id": user_id} if user_id else {"email": email} if email else {}
    try:
        membership = services.team_member_add(team=team, data=data)
    except GatewayError as error:
        errors, status = service_errors(error), error.status
    else:
        messages.success(request, f"Added {membership.user.email} to {team.name}.")
        return redirect("console:team", team_id=team.id)
    return _detail(request, console, team, failed="members", errors=errors, status=status)


@console_view(role=Role.ADMIN, methods=("POST",))
def team_member_remove(request, console: Console, team_id, user_id):
    team = _team(console, team_id)
    membership = get_object_or_404(selectors.team_members(team), user_id=user_id)
    services.team_member_remove(membership=membership)
    messages.success(request, f"Removed {membership.user.email} from {team.name}.")
    return redirect("console:team", team_id=team.id)


urlpatterns = [
    path("teams/", team_list, name="teams"),
    path("teams/new", team_create, name="team-create"),
    path("teams/<uuid:team_id>/", team_detail, name="team"),
    path("teams/<uuid:team_id>/edit", team_update, name="team-update"),
    path("teams/<uuid:team_id>/delete", team_delete, name="team-delete"),
    path("teams/<uuid:team_id>/members/add", team_member_add, name="team-member-add"),
    path("teams/<uuid:team_id>/members/<uuid:user_id>/remove", team_member_remove, name="team-member-remove"),
]
