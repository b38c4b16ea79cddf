"""What the proxy accepts as a request body: checked before any stage sees it, so stages and
adapters can rely on the fields they read. Fields the gateway does not know pass through untouched."""

from typing import Any

from apps.core.errors import InvalidRequest

from .http import ProxyRequest


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def require_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequest(
            "You must provide a model parameter (a string).", code="missing_model", param="model"
        )
    return model


def require_json_content_type(request: ProxyRequest) -> None:
    """OpenAI refuses a body sent as anything but ``application/json`` (400
    ``unsupported_content_type``); parameters such as ``charset`` are fine. A request without the
    header is read as JSON: some HTTP clients send none, and the body decides."""
    content_type = request.headers.get("content-type")
    if content_type is None:
        return
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise InvalidRequest(
            f"Unsupported content type: {content_type[:100]!r}. This endpoint accepts only "
            "'application/json' request bodies.",
            code="unsupported_content_type",
        )


def json_object(request: ProxyRequest) -> dict[str, Any]:
    require_json_content_type(request)
    body = request.json()
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    return body


def validate_chat(body: dict[str, Any]) -> None:
    require_model(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest(
            "'messages' must be a non-empty array.", code="invalid_messages", param="messages"
        )
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidRequest(
                f"messages[{index}] must be an object with a 'role' string.",
                code="invalid_messages",
                param=f"messages[{index}]",
            )
    if "stream" in body and body["stream"] is not None and not isinstance(body["stream"], bool):
        raise InvalidRequest("'stream' must be a boolean.", code="invalid_type", param="stream")
    for name in ("n", "max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (not _is_int(value) or value < 1):
            raise InvalidRequest(f"'{name}' must be a positive integer.", code="invalid_type", param=name)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise InvalidRequest(
            "'stream_options' must be an object.", code="invalid_type", param="stream_options"
        )
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, int | float)
    ):
        raise InvalidRequest("'temperature' must be a number.", code="invalid_type", param="temperature")


def _check_stream(body: dict[str, Any]) -> None:
    if "stream" in body and body["stream"] is not None and not isinstance(body["stream"], bool):
        raise InvalidRequest("'stream' must be a boolean.", code="invalid_type", param="stream")


def _check_positive_ints(body: dict[str, Any], *names: str) -> None:
    for name in names:
        value = body.get(name)
        if value is not None and (not _is_int(value) or value < 1):
            raise InvalidRequest(f"'{name}' must be a positive integer.", code="invalid_type", param=name)


def _check_number(body: dict[str, Any], name: str) -> None:
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise InvalidRequest(f"'{name}' must be a number.", code="invalid_type", param=name)


def validate_responses(body: dict[str, Any]) -> None:
    """OpenAI's Responses API: what the gateway itself reads (the model, the input, streaming, the
    conversation's state); the items are read by the bridge where one is needed, and by OpenAI."""
    require_model(body)
    source = body.get("input")
    if not isinstance(source, str | list):
        raise InvalidRequest(
            "'input' must be a string or an array of input items.", code="invalid_type", param="input"
        )
    _check_stream(body)
    _check_positive_ints(body, "max_output_tokens")
    _check_number(body, "temperature")
    _check_number(body, "top_p")
    for name in ("store", "background"):
        if body.get(name) is not None and not isinstance(body[name], bool):
            raise InvalidRequest(f"'{name}' must be a boolean.", code="invalid_type", param=name)
    if body.get("background") is True:
        # A background Response is answered (and used) later, where the gateway cannot price it.
        raise InvalidRequest(
            "Background responses ('background': true) are not served through the gateway; make the "
            "request in the foreground (streamed, for a long one).",
            code="unsupported_parameter",
            param="background",
        )
    for name in ("previous_response_id", "instructions"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise InvalidRequest(f"'{name}' must be a string.", code="invalid_type", param=name)


def validate_messages(body: dict[str, Any]) -> None:
    """Anthropic's Messages API: what the gateway itself reads (the model, the turns, the maximum it
    reserves a budget by, streaming); the blocks are read by the bridge, or by Anthropic."""
    validate_count_tokens(body)
    if not _is_int(body.get("max_tokens")) or body["max_tokens"] < 1:
        raise InvalidRequest(
            "'max_tokens' must be a positive integer.", code="invalid_type", param="max_tokens"
        )
    _check_stream(body)
    _check_number(body, "temperature")
    _check_number(body, "top_p")


def validate_count_tokens(body: dict[str, Any]) -> None:
    require_model(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest(
            "'messages' must be a non-empty array.", code="invalid_messages", param="messages"
        )
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise InvalidRequest(
                f"messages[{index}] must be an object whose 'role' is user or assistant.",
                code="invalid_messages",
                param=f"messages[{index}]",
            )


def _all_of(items: list[Any], kind: type) -> bool:
    # map(type) and set() run in C: 20 MiB of token ids (millions of numbers) is checked in tens of
    # milliseconds of the event loop, where a Python loop over them took over a second. The exact
    # type, so a bool is no int (the parser makes exact ints and strs).
    return bool(items) and set(map(type, items)) == {kind}


def validate_embeddings(body: dict[str, Any]) -> None:
    require_model(body)
    value = body.get("input")
    valid = (
        (isinstance(value, str) and value != "")
        or (isinstance(value, list) and (_all_of(value, str) or _all_of(value, int)))
        or (isinstance(value, list) and _all_of(value, list) and all(_all_of(item, int) for item in value))
    )
    if not valid:
        raise InvalidRequest(
            "'input' must be a non-empty string, an array of strings, or token arrays.",
            code="invalid_input",
            param="input",
        )
