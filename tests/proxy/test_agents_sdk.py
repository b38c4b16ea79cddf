"""The OpenAI Agents SDK through the gateway: an agent with a function tool, on the SDK's default model
class (the Responses API), against a provider that speaks Responses and one bridged over chat."""

import httpx
import openai
import pytest
from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled

from apps.proxy.upstream import close_sessions
from gateway_project.asgi import application
from tests.proxy.conftest import add_alias_async, add_provider_key_async

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_tracing():
    # The SDK's traces go to OpenAI's servers unless turned off: a test talks to loopback only.
    set_tracing_disabled(True)


@pytest.fixture(params=["openai", "anthropic", "openai_compatible"])
async def agent_model(request, organization, upstream):
    provider = request.param
    await add_provider_key_async(organization, upstream, provider=provider, secret=f"sk-{provider}-upstream")
    await add_alias_async(organization, "agent-model", (provider, "some-model"))
    return upstream


@pytest.fixture
async def gateway_client(gateway_key):
    http_client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application, client=("203.0.113.7", 5000))
    )
    client = openai.AsyncOpenAI(
        api_key=gateway_key[1], base_url="http://gateway/v1", http_client=http_client, max_retries=0
    )
    set_default_openai_client(client, use_for_tracing=False)
    yield client
    await client.close()
    await close_sessions()


async def test_an_agent_calls_its_tool_and_answers_through_the_gateway(agent_model, gateway_client, records):
    called = []

    @function_tool
    def get_weather(city: str) -> str:
        """Today's weather in a city."""
        called.append(city)
        return f"Sunny in {city}"

    agent = Agent(
        name="weather", instructions="Answer with the weather.", model="agent-model", tools=[get_weather]
    )

    result = await Runner.run(agent, "Please call a tool for Paris.")

    assert called == ["Paris"]
    assert result.final_output.startswith("Hello from upstream: ")
    assert "Sunny in Paris" in str(agent_model.last_request.json)  # the tool's output went back
    assert [record.endpoint for record in records] == ["/v1/responses", "/v1/responses"]
    assert all(record.status == 200 and record.usage is not None for record in records)
    paths = {request.path for request in agent_model.requests}
    assert paths <= {"/v1/responses", "/v1/chat/completions", "/v1/messages"}


async def test_an_agent_streams_through_the_gateway(agent_model, gateway_client):
    agent = Agent(name="echo", instructions="Be brief.", model="agent-model")

    result = Runner.run_streamed(agent, "hi")
    kinds = [event.type async for event in result.stream_events()]

    assert "raw_response_event" in kinds
    assert result.final_output == "Hello from upstream: hi"
