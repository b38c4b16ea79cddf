"""Live tail: requests appear as they finish.

The page lists the organization's latest entries from the audit log (server-side, so it reads
without JavaScript); ``static/console/tail.js`` then opens the WebSocket ``/console/tail/ws``
(``apps/console/consumers.py``), which adds each finished request's summary at the top as the proxy
publishes it (``apps/audit/tail.py``). Every role reads it; it never shows a body.
"""

from django.shortcuts import render
from django.urls import path

from apps.audit import selectors
from apps.console.access import Console, console_view
from apps.console.areas import Navigation
from apps.teams.selectors import teams_of

LATEST = 50  # entries the page starts with; the script keeps at most TAIL_ROWS (tail.js)
WEBSOCKET_PATH = "/console/tail/ws"


@console_view()
def tail(request, console: Console):
    organization_id = console.organization.id
    team_names = {team.id: team.name for team in teams_of(organization_id)}
    entries = [
        (entry, team_names.get(entry.team_id))
        for entry in selectors.latest_summaries(organization_id, limit=LATEST)
    ]
    return render(
        request,
        "console/tail/tail.html",
        {
            "console": console,
            "entries": entries,
            "latest": LATEST,
            "websocket_path": f"{WEBSOCKET_PATH}?organization={organization_id}",
        },
    )


NAVIGATION = Navigation("Live tail", "console:tail", "tail")

urlpatterns = [path("tail/", tail, name="tail")]
