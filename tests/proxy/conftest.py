import httpx
import pytest

from gateway_project.asgi import application


@pytest.fixture
async def proxy():
    """An HTTP client for the gateway's ASGI application, in this process."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application, client=("203.0.113.7", 5000)),
        base_url="http://gateway",
    ) as client:
        yield client


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}
