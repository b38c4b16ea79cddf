"""The console's WebSocket routes (``gateway_project/asgi.py`` serves them under its websocket
protocol, behind the Origin check and the session authentication)."""

from django.urls import path, re_path

from .consumers import NoSuchSocket, TailConsumer

websocket_urlpatterns = [
    path("console/tail/ws", TailConsumer.as_asgi()),
    re_path(r"", NoSuchSocket.as_asgi()),  # any other path: refused, not an error in the server log
]
