"""Assignment on the hot path: sticky by hashing, split by weight, and the variant applied to the
body, all from the catalog's plain data."""

import time
from collections import Counter

import pytest

from apps.experiments import services
from apps.experiments.assignment import apply_variant, choose_variant, experiment_snapshot, unit_of
from apps.experiments.selectors import experiment_snapshots

from .conftest import model_experiment


def snapshot(weights, **fields):
    variants = [(f"v{index}", weight, None, None, {}) for index, weight in enumerate(weights)]
    return experiment_snapshot(
        id="0b7c2a52-5d7c-4a43-9d6c-6f0b6f7a9e11",
        name="split",
        target_model="chat",
        target_template_id=None,
        target_template_slug=None,
        variants=fields.get("variants", variants),
    )


def test_the_same_unit_gets_the_same_variant_over_a_thousand_calls():
    experiment = snapshot([1, 1, 1])
    for unit in ("user:alice", "user:bob", "key:42"):
        assert len({choose_variant(experiment, unit).name for _ in range(1000)}) == 1


@pytest.mark.parametrize("weights", [(50, 50), (90, 10), (1, 2, 7), (0, 3, 1)])
def test_ten_thousand_units_split_within_two_percent_of_the_weights(weights):
    experiment = snapshot(weights)
    counts = Counter(choose_variant(experiment, f"user:{n}").name for n in range(10_000))
    for index, weight in enumerate(weights):
        share = counts[f"v{index}"] / 10_000
        assert abs(share - weight / sum(weights)) < 0.02, (weights, counts)
    assert counts["v0"] == 0 or weights[0] > 0


def test_the_same_unit_lands_independently_in_two_experiments():
    one, other = (
        snapshot([1, 1]),
        experiment_snapshot(
            id="9f1d9e8e-2a53-4a39-8c1b-1d7a3c6e0d42",
            name="other",
            target_model="chat",
            target_template_id=None,
            target_template_slug=None,
            variants=[("v0", 1, None, None, {}), ("v1", 1, None, None, {})],
        ),
    )
    pairs = Counter(
        (choose_variant(one, f"u{n}").name, choose_variant(other, f"u{n}").name) for n in range(4000)
    )
    assert all(800 < count < 1200 for count in pairs.values()), pairs


def test_weights_summing_to_zero_make_no_snapshot():
    with pytest.raises(ValueError):
        snapshot([0, 0])


def test_the_unit_is_the_user_else_the_header_else_the_key():
    header = {"x-gateway-experiment-unit": "tenant-7"}
    assert unit_of({"user": "alice"}, header, "key-1") == "user:alice"
    assert unit_of({"user": ""}, header, "key-1") == "unit:tenant-7"
    assert unit_of({"user": 12}, {}, "key-1") == "key:key-1"
    assert unit_of({}, {}, "key-1") == "key:key-1"
    # A user named like a key id is not that key's unit.
    assert unit_of({"user": "key-1"}, {}, "key-1") != unit_of({}, {}, "key-1")


def test_a_variant_replaces_the_model_the_version_and_the_parameters_in_a_new_body():
    experiment = experiment_snapshot(
        id="0b7c2a52-5d7c-4a43-9d6c-6f0b6f7a9e11",
        name="prompt",
        target_model=None,
        target_template_id="1f3c9f4e-8e0a-4e58-9a8e-0c5a2b7f3d10",
        target_template_slug="support",
        variants=[
            ("control", 1, None, None, {}),
            ("v3", 1, "chat-large", 3, {"temperature": 0.1, "max_tokens": 50}),
        ],
    )
    control, variant = experiment.variants
    body = {
        "model": "chat",
        "prompt": {"id": "support", "variables": {"question": "hi"}},
        "temperature": 1.0,
        "max_completion_tokens": 500,
        "user": "alice",
    }
    served = apply_variant(body, experiment, variant)
    assert served == {
        "model": "chat-large",
        "prompt": {"id": "support", "variables": {"question": "hi"}, "version": 3},
        "temperature": 0.1,
        "max_tokens": 50,
        "user": "alice",
    }
    assert body["prompt"] == {"id": "support", "variables": {"question": "hi"}}  # untouched
    assert body["temperature"] == 1.0 and "max_tokens" not in body
    assert apply_variant(body, experiment, control) == body


def test_choosing_and_applying_takes_microseconds():
    experiment = snapshot([1, 1, 1, 1])
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "user": "alice"}
    rounds = 20_000
    started = time.perf_counter()
    for n in range(rounds):
        variant = choose_variant(experiment, unit_of(body, {}, "key") + str(n))
        apply_variant(body, experiment, variant)
    per_call_us = (time.perf_counter() - started) / rounds * 1e6
    print(f"unit_of + choose_variant + apply_variant: {per_call_us:.2f} µs")
    assert per_call_us < 50


def test_pause_and_resume_keep_every_units_variant(organization, aliases, django_capture_on_commit_callbacks):
    experiment = model_experiment(organization, weights=(30, 70))
    services.experiment_start(experiment=experiment)
    before = experiment_snapshots(organization.id).for_model("chat")
    assigned = {unit: choose_variant(before, unit).name for unit in (f"user:{n}" for n in range(1000))}

    services.experiment_pause(experiment=experiment)
    assert experiment_snapshots(organization.id).for_model("chat") is None  # a paused one assigns nothing
    services.experiment_resume(experiment=experiment)

    after = experiment_snapshots(organization.id).for_model("chat")
    assert {unit: choose_variant(after, unit).name for unit in assigned} == assigned
    assert set(assigned.values()) == {"control", "large"}


def test_the_catalog_holds_running_experiments_by_target_in_two_queries(
    organization, aliases, django_assert_num_queries
):
    from tests.prompts.conftest import make_template

    template = make_template(organization, versions=2)
    services.experiment_start(experiment=model_experiment(organization))
    prompt = services.experiment_create(
        organization=organization,
        data={
            "name": "v2 against v1",
            "target": {"prompt": "support"},
            "variants": [
                {"name": "v1", "weight": 1, "prompt_version": 1},
                {"name": "v2", "weight": 1, "prompt_version": 2},
            ],
        },
    )
    services.experiment_start(experiment=prompt)
    model_experiment(organization, name="a draft")  # drafts are not in the catalog
    with django_assert_num_queries(2):
        catalog = experiment_snapshots(organization.id)
    assert catalog.for_model("chat").name == "bigger model"
    assert catalog.for_model("chat-large") is None
    assert catalog.for_prompt("support").id == str(prompt.id)
    assert catalog.for_prompt(str(template.id).upper()).id == str(prompt.id)
    [control, large] = catalog.for_model("chat").variants
    assert control.control and not large.control and large.model == "chat-large"
