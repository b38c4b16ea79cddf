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
from apps.console.views.logs import rows_with_names
from apps.keys.selectors import api_keys_of
from apps.teams.selectors import teams_of

LATEST = 50  # entries the page starts with; the script keeps at most TAIL_ROWS (tail.js)
WEBSOCKET_PATH = "/console/tail/ws"


@console_view()
def tail(request, console: Console):
    organization_id = console.organization.id
    entries = rows_with_names(
        selectors.latest_summaries(organization_id, limit=LATEST),
        teams=teams_of(organization_id),
        api_keys=api_keys_of(organization_id),
    )
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


urlpatterns = [path("tail/", tail, name="tail")]
