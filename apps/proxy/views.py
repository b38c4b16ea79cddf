"""The proxy's endpoints. Each is an async function of a ProxyRequest whose key is already
authenticated; the routes in app.py say which permission each needs."""

from apps.proxy.http import ProxyRequest, ProxyResponse


async def list_models(request: ProxyRequest) -> ProxyResponse:
    # The model catalog arrives with the routing issue; until then an organization has no models.
    return ProxyResponse.json({"object": "list", "data": []})
