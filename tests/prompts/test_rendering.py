"""The template syntax: tags, malformed tags with their position, values inserted literally."""

import pytest

from apps.prompts.rendering import TemplateSyntaxError, compile_text, value_text


def render(template: str, **values) -> str:
    return compile_text(template).render({name: value_text(value) for name, value in values.items()})


def test_it_replaces_each_tag_with_spaces_or_without():
    assert (
        render("Hi {{name}}, {{ name }} and {{\tcity }}!", name="Ada", city="Paris")
        == "Hi Ada, Ada and Paris!"
    )


def test_a_text_without_tags_is_one_literal():
    compiled = compile_text('plain {single} braces and }} closings {"a": {"b": 1}}')

    assert compiled.names == ()
    assert compiled.render({}) == 'plain {single} braces and }} closings {"a": {"b": 1}}'


def test_it_compiles_into_literals_and_names():
    compiled = compile_text("{{a}} and {{ b }}{{a}}")

    assert compiled.literals == ("", " and ", "", "")
    assert compiled.names == ("a", "b", "a")
    assert compiled.variables == {"a", "b"}


def test_a_value_that_holds_a_tag_is_inserted_literally_and_never_expanded():
    assert render("Say {{text}}", text="{{secret}} and {{ text }}") == "Say {{secret}} and {{ text }}"


def test_numbers_and_booleans_are_written_as_json_writes_them():
    assert (
        render("{{a}} {{b}} {{c}} {{d}} {{e}}", a=3, b=0.5, c=True, d=False, e=1e100)
        == "3 0.5 true false 1e+100"
    )


@pytest.mark.parametrize("value", [None, [1], {"a": 1}, float("nan"), float("inf")])
def test_other_values_are_refused(value):
    with pytest.raises((TypeError, ValueError)):
        value_text(value)


@pytest.mark.parametrize(
    ("text", "position", "words"),
    [
        ("Hello {{name", 6, "never closed"),
        ("Hello {{ name }", 6, "never closed"),
        ("Hello {{ name } and {{ city }}", 6, "never closed"),
        ("{{}}", 0, "Empty tag"),
        ("ok {{ user.name }}", 3, "not a variable"),
        ("ok {{ name | upper }}", 3, "not a variable"),
        ("ok {{ 1st }}", 3, "not a variable"),
        ("{{{name}}}", 0, "not a variable"),
        ("{{ __import__('os').system('x') }}", 0, "not a variable"),
        ("line\n{{ name\n}}", 5, "never closed"),
    ],
)
def test_a_malformed_tag_is_refused_with_its_position(text, position, words):
    with pytest.raises(TemplateSyntaxError) as raised:
        compile_text(text)

    assert raised.value.position == position
    assert words in str(raised.value)
    assert f"at position {position}." in str(raised.value)


def test_rendering_without_a_value_for_a_name_is_a_key_error():
    with pytest.raises(KeyError):
        compile_text("{{a}}").render({})
