"""Tool-call parsing and formatting (pure)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from matpo_graph.core.toolcalls import (
    answer_instructions,
    format_tool_call,
    format_tool_result,
    parse_tool_calls,
    strip_for_parent,
    tool_instructions,
)


def test_parse_hermes_single_call():
    text = 'Let me look.\n<tool_call>\n{"name": "web_search", "arguments": {"query": "eiffel"}}\n</tool_call>'
    [call] = parse_tool_calls(text, "hermes")
    assert (call.name, call.arguments, call.error) == ("web_search", {"query": "eiffel"}, None)
    assert call.raw.startswith("<tool_call>") and call.raw.endswith("</tool_call>")


def test_parse_xml_several_calls_in_order():
    text = (
        '<use_tool><name>a</name><arguments>{"x": 1}</arguments></use_tool> and '
        '<use_tool>\n  <name> b </name>\n  <arguments>\n{"y": [2]}\n</arguments>\n</use_tool>'
    )
    calls = parse_tool_calls(text, "xml")
    assert [(c.name, c.arguments, c.error) for c in calls] == [("a", {"x": 1}, None), ("b", {"y": [2]}, None)]


def test_parse_tolerates_code_fence_and_trailing_garbage():
    fenced = '<tool_call>```json\n{"name": "s", "arguments": {"q": "z"}}\n```</tool_call>'
    garbage = '<tool_call>{"name": "s", "arguments": {"q": "z"}}}</tool_call>'
    xml_fenced = '<use_tool><name>s</name><arguments>```json\n{"q": "z"}\n```</arguments></use_tool>'
    for text, fmt in ((fenced, "hermes"), (garbage, "hermes"), (xml_fenced, "xml")):
        [call] = parse_tool_calls(text, fmt)
        assert (call.name, call.arguments, call.error) == ("s", {"q": "z"}, None), text


def test_parse_records_bad_json():
    [h] = parse_tool_calls('<tool_call>{"name": "s", "arguments": {"q": </tool_call>', "hermes")
    [x] = parse_tool_calls("<use_tool><name>s</name><arguments>{q: 1}</arguments></use_tool>", "xml")
    assert "bad JSON" in h.error and h.arguments is None
    assert x.name == "s" and "bad JSON" in x.error and x.arguments is None


def test_parse_records_missing_name():
    [h] = parse_tool_calls('<tool_call>{"arguments": {"q": 1}}</tool_call>', "hermes")
    [x] = parse_tool_calls('<use_tool><arguments>{"q": 1}</arguments></use_tool>', "xml")
    assert h.error == "missing name" and h.name == ""
    assert x.error == "missing name" and x.arguments == {"q": 1}


def test_parse_records_unclosed_tag():
    [h] = parse_tool_calls('<tool_call>{"name": "s", "arguments": {"q": 1}}', "hermes")
    assert h.error.startswith("unclosed <tool_call>") and h.name == "s" and h.arguments == {"q": 1}
    [x] = parse_tool_calls('<use_tool><name>s</name><arguments>{"q": 1}', "xml")
    assert "unclosed <use_tool>" in x.error and "unclosed <arguments>" in x.error


def test_parse_second_open_tag_closes_unclosed_first():
    text = '<tool_call>{"name": "a", "arguments": {}}\n<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    a, b = parse_tool_calls(text, "hermes")
    assert a.name == "a" and a.error is not None and b.name == "b" and b.error is None


def test_parse_arguments_as_json_string_and_non_object():
    [ok] = parse_tool_calls('<tool_call>{"name": "s", "arguments": "{\\"q\\": 2}"}</tool_call>', "hermes")
    [bad] = parse_tool_calls('<tool_call>{"name": "s", "arguments": [1]}</tool_call>', "hermes")
    assert ok.arguments == {"q": 2} and ok.error is None
    assert bad.error == "arguments must be a JSON object, got list"


def test_parse_ignores_calls_inside_thinking_and_other_format():
    text = '<think>maybe <tool_call>{"name": "x", "arguments": {}}</tool_call></think>The answer is 4.'
    assert parse_tool_calls(text, "hermes") == []
    assert parse_tool_calls('<tool_call>{"name": "x", "arguments": {}}</tool_call>', "xml") == []


def test_parse_unknown_format_raises():
    with pytest.raises(ValueError, match="unknown tool call format 'json'"):
        parse_tool_calls("", "json")  # type: ignore[arg-type]


_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    name=_names, args=st.dictionaries(st.text(max_size=10), _json, max_size=4), fmt=st.sampled_from(["xml", "hermes"])
)
@example(name="A", args={"<THINK>": None}, fmt="xml")  # found by this test: the key opened a thinking block
def test_format_then_parse_round_trips(name, args, fmt):
    [call] = parse_tool_calls("prefix " + format_tool_call(name, args, fmt) + " suffix", fmt)
    assert (call.name, call.arguments, call.error) == (name, args, None)


def test_strip_for_parent_removes_thinking_and_calls():
    text = (
        "<think>secret plan</think>Found it: Paris.\n\n\n\n"
        '<tool_call>{"name": "s", "arguments": {}}</tool_call>'
        '<use_tool><name>s</name><arguments>{}</arguments></use_tool> Source: wiki. <tool_call>{"name"'
    )
    assert strip_for_parent(text) == "Found it: Paris.\n\n Source: wiki."
    assert strip_for_parent("reasoning</think>Answer") == "Answer"
    assert strip_for_parent("Answer<think>never closed") == "Answer"


def test_instructions_mention_format_and_tools():
    tools = [
        {
            "name": "web_search",
            "description": "Search.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        }
    ]
    xml = tool_instructions("xml", tools)
    assert "<use_tool>" in xml and "web_search" in xml
    [example] = parse_tool_calls(xml, "xml")
    assert example.name == "web_search" and example.error is None
    assert "<tool_call>" in tool_instructions("hermes", tools)
    assert "no tools" in tool_instructions("xml", [])
    assert "\\boxed{" in answer_instructions("boxed") and "<answer>" in answer_instructions("tag")
    assert "report" in answer_instructions("boxed", is_root=False)
    assert format_tool_result("s", "hi", "xml") == '<tool_result name="s">\nhi\n</tool_result>'


def test_closing_tag_quoted_inside_the_arguments_does_not_end_the_call():
    # found by hypothesis: an argument value that quotes the closing tag
    for fmt in ("hermes", "xml"):
        text = "prefix " + format_tool_call("A", {"": "</TOOL_CALL> and <tool_call>"}, fmt) + " suffix"
        [call] = parse_tool_calls(text, fmt)
        assert (call.name, call.arguments, call.error) == ("A", {"": "</TOOL_CALL> and <tool_call>"}, None)


@pytest.mark.parametrize("fmt", ["xml", "hermes", "native", "llama3_json"])
def test_arguments_holding_tags_round_trip(fmt):
    args = {"q": "<think>x</think> </tool_call> </use_tool> </arguments>", "<think>": "<"}
    text = format_tool_call("search", args, fmt)
    assert "<think>" not in text and "</tool_call>" not in text.removesuffix("</tool_call>")
    [call] = parse_tool_calls(text, fmt)
    assert (call.name, call.arguments, call.error) == ("search", args, None)
