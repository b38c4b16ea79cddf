"""The hot-path engine, called as the proxy calls it: plain snapshots in, verdicts out."""

import copy
import json
import time

import pytest

from apps.policies.engine import PolicyEngine, PolicySnapshot, UnreadableInput

ANY = {"model": "gpt-4o-mini", "team_id": None, "api_key_id": "key-1"}


def policy(name="p", action="redact", **values) -> PolicySnapshot:
    values.setdefault("rules_checked", True)  # as the selector says of patterns saved through the API
    return PolicySnapshot(id=f"id-{name}", name=name, action=action, **values)


def chat(*contents) -> dict:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": c} for c in contents]}


def check(engine, body, endpoint="chat.completions", **context):
    return engine.check_request(body, endpoint=endpoint, **{**ANY, **context})


def test_an_engine_without_policies_is_empty_and_changes_nothing():
    engine = PolicyEngine.build([])
    body = chat("mail ada@example.com")

    verdict = check(engine, body)

    assert engine.is_empty
    assert verdict.body is body
    assert (verdict.action, verdict.reason, verdict.decisions, verdict.blocked) == (None, None, (), None)


def test_redaction_replaces_each_match_in_a_new_body_and_leaves_the_callers_alone():
    engine = PolicyEngine.build(
        [policy(detectors=("email", "secret"), patterns=(r"ACME-\d{4}",), terms=("Project Titan",))]
    )
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "ticket ACME-1234 about project titan"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "I am ada@example.com"},
                    {"type": "image_url", "image_url": {"url": "x"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"key": "sk-proj-abcdefghijklmnopqrstuv"}'},
                    }
                ],
            },
        ],
    }
    original = copy.deepcopy(body)

    verdict = check(engine, body)

    assert body == original
    messages = verdict.body["messages"]
    assert messages[0]["content"] == "ticket [REDACTED:pattern] about [REDACTED:term]"
    assert messages[1]["content"][0]["text"] == "I am [REDACTED:email]"
    assert messages[1]["content"][1] == original["messages"][1]["content"][1]
    assert json.loads(messages[2]["tool_calls"][0]["function"]["arguments"]) == {"key": "[REDACTED:secret]"}
    assert verdict.action == "redacted"
    assert verdict.reason == "p: pattern, term, email, secret"
    assert {d.category: d.count for d in verdict.decisions} == {
        "pattern": 1,
        "term": 1,
        "email": 1,
        "secret": 1,
    }
    assert verdict.decisions[0].as_record() == {
        "policy": "p",
        "action": "redacted",
        "category": "pattern",
        "count": 1,
    }


def test_embeddings_inputs_are_read_and_token_ids_refused_where_a_policy_reads_text():
    engine = PolicyEngine.build([policy(detectors=("email",))])
    models_only = PolicyEngine.build([policy(action="block", denied_models=frozenset({"x/y"}))])

    one = check(engine, {"input": "ada@example.com"}, endpoint="embeddings")
    many = check(engine, {"input": ["x", "bob@example.org"]}, endpoint="embeddings")
    with pytest.raises(UnreadableInput):
        check(engine, {"input": [[1, 2, 3]]}, endpoint="embeddings")

    assert one.body["input"] == "[REDACTED:email]"
    assert many.body["input"] == ["x", "[REDACTED:email]"]
    assert check(models_only, {"input": [[1, 2, 3]]}, endpoint="embeddings").action is None


def test_terms_are_whole_words_and_case_insensitive():
    engine = PolicyEngine.build([policy(action="block", terms=("secret plan", "foo"))])

    assert check(engine, chat("the SECRET  PLAN")).action is None  # two spaces: another phrase
    assert check(engine, chat("The Secret Plan.")).action == "blocked"
    assert check(engine, chat("food and foobar")).action is None
    assert check(engine, chat("(foo)")).action == "blocked"


def test_a_block_stops_the_policies_after_it_and_earlier_decisions_stay():
    engine = PolicyEngine.build(
        [
            policy("flagger", "flag", detectors=("email",)),
            policy("blocker", "block", terms=("forbidden",)),
            policy("later", "redact", detectors=("email",)),
        ]
    )
    body = chat("ada@example.com forbidden")

    verdict = check(engine, body)

    assert verdict.action == "blocked"
    assert verdict.blocked.policy == "blocker" and verdict.blocked.category == "term"
    assert verdict.reason == "blocker: term"
    assert [(d.policy, d.action) for d in verdict.decisions] == [
        ("flagger", "flagged"),
        ("blocker", "blocked"),
    ]
    assert verdict.body is body


def test_denied_models_and_the_prompt_size_trigger_a_policy():
    engine = PolicyEngine.build(
        [
            policy("no-big", "block", max_prompt_chars=10),
            policy("no-o1", "block", denied_models=frozenset({"o1"})),
        ]
    )

    assert check(engine, chat("short")).action is None
    assert check(engine, chat("12345", "678901")).reason == "no-big: max_prompt_chars"
    assert check(engine, chat("hi"), model="o1").reason == "no-o1: denied_model"


def test_a_redact_policys_model_and_size_triggers_count_as_flags():
    engine = PolicyEngine.build([policy("r", "redact", detectors=("email",), max_prompt_chars=3)])

    verdict = check(engine, chat("no mail here"))

    assert verdict.action == "flagged"
    assert verdict.body["messages"][0]["content"] == "no mail here"


def test_the_header_action_is_blocked_over_redacted_over_flagged():
    engine = PolicyEngine.build(
        [policy("f", "flag", terms=("hello",)), policy("r", "redact", detectors=("email",))]
    )

    verdict = check(engine, chat("hello ada@example.com"))

    assert verdict.action == "redacted"
    assert verdict.reason == "r: email"


def test_scope_limits_a_policy_to_its_teams_keys_and_models():
    engine = PolicyEngine.build(
        [
            policy(
                detectors=("email",),
                teams=frozenset({"t1"}),
                api_keys=frozenset({"k1"}),
                models=frozenset({"m1"}),
            )
        ]
    )
    body = chat("ada@example.com")

    assert check(engine, body, team_id="t1", api_key_id="k1", model="m1").action == "redacted"
    assert check(engine, body, team_id=None, api_key_id="k1", model="m1").action is None
    assert check(engine, body, team_id="t1", api_key_id="k2", model="m1").action is None
    assert check(engine, body, team_id="t1", api_key_id="k1", model="m2").action is None


def test_the_reason_is_printable_ascii_bounded_and_never_the_matched_text():
    engine = PolicyEngine.build(
        [policy(f"Données\r\n{i}-" + "x" * 60, "flag", detectors=("email", "phone")) for i in range(6)]
    )

    verdict = check(engine, chat("ada@example.com +44 20 7946 0958"))

    assert len(verdict.reason) <= 200
    assert all(" " <= c <= "~" for c in verdict.reason)
    assert "ada@" not in verdict.reason
    assert verdict.action == "flagged"


def test_a_catastrophic_pattern_is_stopped_within_the_bound_and_blocks_with_timeout():
    engine = PolicyEngine.build(
        [
            policy("email-only", detectors=("email",)),
            policy("harmless", "flag", patterns=(r"zz\d",)),
            policy("bad", "flag", patterns=(r"(a+)+$",)),
        ],
        timeout=0.05,
    )
    body = chat("a" * 5000 + "b")

    began = time.perf_counter()
    verdict = check(engine, body)
    elapsed = time.perf_counter() - began

    assert elapsed < 0.5
    assert verdict.action == "blocked"
    assert (verdict.blocked.policy, verdict.blocked.category) == ("bad", "timeout")
    assert verdict.reason == "bad: timeout"


def test_every_applicable_policy_is_scanned_by_one_scanner_compiled_once():
    policies = [policy(f"p{i}", "flag", patterns=(f"marker{i}",), detectors=("email",)) for i in range(10)]
    engine = PolicyEngine.build(policies)
    text = " ".join(f"marker{i}" for i in range(10)) + " ada@example.com"

    verdict = check(engine, chat(text))
    check(engine, chat("again"))

    [compiled] = engine._sets.values()  # one scanner for this set of policies, built once
    assert len(compiled.scanner.rules) == 11  # ten patterns and the e-mail detector they share
    assert {d.policy for d in verdict.decisions} == {f"p{i}" for i in range(10)}
    assert sum(1 for d in verdict.decisions if d.category == "email") == 10


def test_a_users_inline_flag_stays_inside_their_pattern():
    engine = PolicyEngine.build([policy(patterns=("(?i)abc", "xyz"))])

    verdict = check(engine, chat("ABC XYZ xyz"))

    assert verdict.body["messages"][0]["content"] == "[REDACTED:pattern] XYZ [REDACTED:pattern]"


# --- Answers ---------------------------------------------------------------------------------------

ANSWER = (
    "Write to ada@example.com or bob.smith@corp.example.org; the key is sk-ant-api03-abcdefghijklmnop. "
    "Project Titan ships. Card 4111 1111 1111 1111, call +44 20 7946 0958, host 10.0.0.1."
)


def redactor():
    engine = PolicyEngine.build(
        [
            policy(
                "pii",
                detectors=("email", "secret", "payment_card", "phone", "ip_address"),
                terms=("project titan",),
                apply_to_response=True,
            ),
            policy("prompts-only", detectors=("iban",)),
        ]
    )
    return engine.response_redactor(**ANY)


def frame(index: int, content, finish=None) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": index, "delta": {"content": content}, "finish_reason": finish}],
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


def contents(output: bytes) -> dict[int, str]:
    texts: dict[int, str] = {}
    for raw in output.decode().split("\n\n"):
        if raw.startswith("data: {"):
            for choice in json.loads(raw[6:]).get("choices", []):
                texts[choice["index"]] = texts.get(choice["index"], "") + (
                    choice["delta"].get("content") or ""
                )
    return texts


def test_no_redactor_without_a_redact_policy_that_applies_to_answers():
    engine = PolicyEngine.build([policy(detectors=("email",)), policy("b", "block", terms=("x",))])

    assert engine.response_redactor(**ANY) is None


def test_an_answer_is_redacted_whole():
    text, decisions = redactor().redact_text(ANSWER)

    assert "ada@" not in text and "sk-ant" not in text and "4111" not in text and "10.0.0.1" not in text
    assert text.startswith(
        "Write to [REDACTED:email] or [REDACTED:email]; the key is [REDACTED:secret]. [REDACTED:term]"
    )
    assert {d.category: d.count for d in decisions}["email"] == 2


def test_a_stream_split_at_every_boundary_gives_the_text_redacted_whole():
    stream_redactor = redactor()
    whole, _ = stream_redactor.redact_text(ANSWER)
    for cut in range(len(ANSWER) + 1):
        for second in (cut, min(len(ANSWER), cut + 3), min(len(ANSWER), cut + 40)):
            stream = stream_redactor.stream()
            out = stream.on_chunk(frame(0, ANSWER[:cut]))
            out += stream.on_chunk(frame(0, ANSWER[cut:second]) + frame(0, ANSWER[second:]))
            out += stream.on_chunk(frame(0, "", "stop"))
            out += stream.on_chunk(b"data: [DONE]\n\n") + stream.finish()
            assert contents(out) == {0: whole}, (cut, second)
            assert out.endswith(b"data: [DONE]\n\n")


def test_a_stream_split_one_character_a_chunk_holds_back_at_most_the_bound():
    stream = redactor().stream()
    out = b""
    for index, character in enumerate(ANSWER):
        out += stream.on_chunk(frame(0, character))
        assert index + 1 - len(contents(out).get(0, "")) <= 2 * 256 + 64
    out += stream.finish()

    assert contents(out) == {0: redactor().redact_text(ANSWER)[0]}
    assert {d.category for d in stream.decisions} >= {"email", "secret", "term", "payment_card", "phone"}


def test_frames_split_anywhere_comments_usage_and_done_keep_their_order():
    stream = redactor().stream()
    usage = b'data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"total_tokens":3}}\n\n'
    raw = (
        frame(0, "mail ada@exa")
        + b": keep-alive\n\n"
        + frame(1, "other ")
        + frame(0, "mple.com now")
        + usage
        + b"data: [DONE]\n\n"
    )

    out = b"".join(stream.on_chunk(raw[i : i + 7]) for i in range(0, len(raw), 7)) + stream.finish()

    assert contents(out) == {0: "mail [REDACTED:email] now", 1: "other "}
    text = out.decode()
    assert text.index(": keep-alive") < text.index('"usage"') < text.index("[DONE]")
    assert text.rindex("now") < text.index('"usage"')


def test_a_finish_reason_releases_its_choices_text_in_its_own_frame():
    stream = redactor().stream()

    first = stream.on_chunk(frame(0, "contact ada@example"))
    last = stream.on_chunk(frame(0, ".com", "stop"))

    assert "ada" not in contents(first).get(0, "")
    assert contents(last) == {0: contents(last)[0]}
    assert (contents(first).get(0, "") + contents(last)[0]) == "contact [REDACTED:email]"
    assert json.loads(last.decode()[6:].strip())["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("size", [16_000])
def test_ten_policies_on_a_long_prompt_take_little_time(size):
    """Not a benchmark (make bench is): a bound that a per-policy scan of the text would break."""
    prose = "Please review the section of the design document about request handling in 2024. " * 300
    policies = [
        policy(f"p{i}", "flag", detectors=("email", "phone", "secret"), patterns=(f"project-{i}",))
        for i in range(10)
    ]
    engine = PolicyEngine.build(policies)
    body = chat(prose[:size])
    check(engine, body)

    began = time.perf_counter()
    for _ in range(10):
        check(engine, body)

    assert (time.perf_counter() - began) / 10 < 0.05
