"""The live tail's WebSocket, ``/console/tail/ws`` (routed in ``gateway_project/asgi.py``).

It is the console, over a WebSocket: the session cookie authenticates it (``AuthMiddlewareStack``),
the Origin header must be one of ``ALLOWED_HOSTS`` (``AllowedHostsOriginValidator``: another site's
page cannot open it with the visitor's cookie), and the organization is the one the console session
works in (``apps.console.access``, with the same membership check as every console page). A
connection without a signed-in member, or one that asks for any other organization
(``?organization=<id>``), is refused: closed with 4401 or 4403 before it is accepted.

Once accepted, it joins its organization's group (``apps.audit.tail.tail_group``) and forwards each
published summary as ``{"type": "request", ...}``, the log list's fields plus the team's and the API
key's names. Every role may watch (members read the log); the summaries carry no body, whatever the
organization keeps. While messages flow, the session and the membership are checked again at most every
``RECHECK_SECONDS``: a member signed out, whose password changed, or removed from the organization
stops receiving within that time.
"""

import time
import uuid
from types import SimpleNamespace
from urllib.parse import parse_qs

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.audit.tail import tail_group
from apps.console.access import console_of
from apps.keys.selectors import api_keys_of
from apps.organizations.models import Membership, Role
from apps.teams.models import Team

NOT_SIGNED_IN = 4401
FORBIDDEN = 4403
NOT_FOUND = 4404
RECHECK_SECONDS = 30.0


def _console(scope):
    """The console of the connection's session, as ``console_of`` finds it for a page."""
    return console_of(SimpleNamespace(user=scope["user"], session=scope["session"]))


def _names(organization_id) -> dict[str, str]:
    """The organization's teams' and API keys' names by id: what a row shows instead of an id."""
    teams = Team.objects.filter(organization_id=organization_id).values_list("pk", "name")
    keys = api_keys_of(organization_id).values_list("pk", "name")
    return {str(pk): name for pk, name in (*teams, *keys)}


def _still_allowed(session, user_id, organization_id) -> bool:
    """The session still exists (not signed out) and its user still belongs to the organization."""
    if session.session_key is None or not session.exists(session.session_key):
        return False
    membership = Membership.objects.filter(user_id=user_id, organization_id=organization_id).first()
    return membership is not None and membership.has_role(Role.MEMBER)


class TailConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=NOT_SIGNED_IN)
            return
        console = await database_sync_to_async(_console)(self.scope)
        if console is None or not console.can(Role.MEMBER):
            await self.close(code=FORBIDDEN)
            return
        if not self._asks_for(console.organization.id):
            await self.close(code=FORBIDDEN)
            return
        self.user = user
        self.organization_id = console.organization.id
        self.names = await database_sync_to_async(_names)(self.organization_id)
        self.checked_at = time.monotonic()
        self.group = tail_group(self.organization_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "hello", "organization": str(self.organization_id)})

    def _asks_for(self, organization_id) -> bool:
        """No ``organization`` parameter means the session's; any other value than it is refused."""
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        asked = query.get("organization", [None])[-1]
        if asked is None:
            return True
        try:
            return uuid.UUID(asked) == organization_id
        except ValueError:
            return False

    async def disconnect(self, code) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def _still_allowed(self) -> bool:
        # get_user checks the session's password hash, as Django does for a page (a changed password
        # ends the session); _still_allowed that the session was not signed out and the membership.
        user = await get_user(self.scope)
        if not user.is_authenticated or user.pk != self.user.pk:
            return False
        return await database_sync_to_async(_still_allowed)(
            self.scope["session"], self.user.pk, self.organization_id
        )

    async def receive_json(self, content, **kwargs) -> None:
        """The tail only sends; anything the browser sends is ignored."""

    async def tail_requests(self, event) -> None:
        """A batch published by ``apps.audit.tail``: each summary, with its team's and key's names."""
        if time.monotonic() - self.checked_at > RECHECK_SECONDS:
            if not await self._still_allowed():
                await self.close(code=FORBIDDEN)
                return
            self.checked_at = time.monotonic()
        for request in event["requests"]:
            team_id, api_key_id = request.get("team_id"), request.get("api_key_id")
            named = [str(pk) for pk in (team_id, api_key_id) if pk is not None]
            if any(pk not in self.names for pk in named):
                # A team or key made since the page opened: read the names again, once per new id.
                self.names = await database_sync_to_async(_names)(self.organization_id)
                for pk in named:
                    self.names.setdefault(pk, "")
            await self.send_json(
                {
                    "type": "request",
                    **request,
                    "team_name": self.names.get(str(team_id), "") if team_id else "",
                    "api_key_name": self.names.get(str(api_key_id), "") if api_key_id else "",
                }
            )


class NoSuchSocket(AsyncJsonWebsocketConsumer):
    """Every other WebSocket path: refused."""

    async def connect(self) -> None:
        await self.close(code=NOT_FOUND)
