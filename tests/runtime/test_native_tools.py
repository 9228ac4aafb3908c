"""tool_call_format native: the model's own chat template renders the tools and the results, and its calls are
read in its dialect. Checked with templates written in the manner of Qwen2.5's, Qwen3's (which strips reasoning)
and Llama 3.x's, on the real SmolLM2 tokenizer (special tokens added where a template needs them)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from matpo_graph.core.toolcalls import format_tool_call, parse_tool_calls
from matpo_graph.runtime.chat import ChatTemplateError, ChatTokenizer
from matpo_graph.runtime.executor import Executor
from matpo_graph.runtime.policies.scripted import ScriptedPolicy

from rt_helpers import EchoSearch, program, role, search_callable

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
LLAMA_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
                  "<|python_tag|>"]


def tokenizer_with(template: str):  # type: ignore[no-untyped-def]
    """SmolLM2's tokenizer files with another chat template (and, for Llama-style, its special tokens)."""
    from transformers import AutoTokenizer

    from matpo_graph.runtime.models import resolve_model

    tok = AutoTokenizer.from_pretrained(str(resolve_model()))
    tok.chat_template = (TEMPLATES / template).read_text()
    if template.startswith("llama3"):
        tok.add_special_tokens({"additional_special_tokens": LLAMA_SPECIALS})
        tok.bos_token = "<|begin_of_text|>"
        tok.eos_token = "<|eot_id|>"
    return tok


def native_program():  # type: ignore[no-untyped-def]
    solver = role("solver", [search_callable()], root=True, max_turns=3)
    return program({"solver": solver}, root="solver", fmt="native")


def run_tree(chat: ChatTokenizer, replies: list[str]):  # type: ignore[no-untyped-def]
    tool = EchoSearch(text="Paris is the capital of France.")
    ex = Executor(native_program(), ScriptedPolicy(replies, chat), chat, {"web_search": tool})
    return asyncio.run(ex.run("What is the capital of France?", answers=["Paris"])), tool


QWEN_CALL = '<tool_call>\n{"name": "web_search", "arguments": {"query": "capital of France"}}\n</tool_call>'
CASES = {
    "qwen_style.jinja": ("hermes", [QWEN_CALL, "It is \\boxed{Paris}."], "<tool_response>\nParis is the capital"),
    "qwen3_style.jinja": ("hermes", ["<think>\nI should look it up.\n</think>\n\n" + QWEN_CALL,
                                     "<think>\nThe result says Paris.\n</think>\n\nIt is \\boxed{Paris}."],
                          "<tool_response>\nParis is the capital"),
    "llama3_style.jinja": ("llama3_json", ['{"name": "web_search", "parameters": {"query": "capital of France"}}',
                                           "It is \\boxed{Paris}."],
                           "<|start_header_id|>ipython<|end_header_id|>\n\nParis is the capital"),
}


@pytest.mark.parametrize("template", sorted(CASES))
def test_native_rollout_renders_tools_through_the_template_and_reads_its_calls(template):
    dialect, replies, result_text = CASES[template]
    chat = ChatTokenizer(tokenizer_with(template))
    assert chat.native_dialect() == dialect
    tree, tool = run_tree(chat, replies)
    root = tree.root
    assert tool.calls == [{"query": "capital of France"}]
    [call] = root.turns[0].calls
    assert call.valid and call.name == "web_search" and call.kind == "tool"
    assert root.termination == "answer" and "\\boxed{Paris}" in root.final_text
    text = chat.decode(root.token_ids, skip_special_tokens=False)
    assert '"name": "web_search"' in text[: text.index("capital of France?")]  # the template's own tool list
    assert result_text in text  # the template wrapped the tool result
    # what the model generated is trained, what the template wrapped around it is not
    trained = chat.decode([t for t, m in zip(root.token_ids, root.loss_mask, strict=True) if m],
                          skip_special_tokens=False)
    assert "capital of France" in trained and "Paris is the capital" not in trained and "<tools>" not in trained


def test_native_qwen_style_context_equals_the_template_rendering():
    chat = ChatTokenizer(tokenizer_with("qwen_style.jinja"))
    tree, _ = run_tree(chat, CASES["qwen_style.jinja"][1])
    root = tree.root
    tools = [{"type": "function", "function": {"name": "web_search", "description": "Search the web.",
                                               "parameters": search_callable().parameters}}]
    reference = chat.with_tools(tools).template_ids([{"role": m.role, "content": m.content} for m in root.messages])
    # equal, except that a trajectory ends on its last sampled token (the template's "\n" after it comes later)
    n = len(root.token_ids)
    assert reference[:n] == root.token_ids and chat.decode(reference[n:], skip_special_tokens=False) == "\n"


def test_native_reasoning_template_keeps_what_was_sampled():
    """Qwen3-style templates drop old reasoning when they re-render; the context keeps the sampled tokens."""
    chat = ChatTokenizer(tokenizer_with("qwen3_style.jinja"))
    tree, _ = run_tree(chat, CASES["qwen3_style.jinja"][1])
    text = chat.decode(tree.root.token_ids, skip_special_tokens=False)
    assert "I should look it up." in text and "The result says Paris." in text


def test_native_needs_a_template_with_tools():
    from matpo_graph.runtime.models import resolve_model

    chat = ChatTokenizer.from_pretrained(resolve_model())  # SmolLM2's template has no tools
    with pytest.raises(ChatTemplateError, match="tool_call_format native needs a chat template that defines tools"):
        Executor(native_program(), ScriptedPolicy(["x"], chat), chat, {"web_search": EchoSearch()})


def test_llama3_json_calls_parse_and_round_trip():
    calls = parse_tool_calls('<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}',
                             "llama3_json")
    assert [(c.name, c.arguments, c.error) for c in calls] == [("a", {"x": 1}, None), ("b", {}, None)]
    assert parse_tool_calls("The answer is \\boxed{4}.", "llama3_json") == []
    [bad] = parse_tool_calls('{"name": "a", "parameters": {"x": ', "llama3_json")
    assert bad.error and bad.error.startswith("bad JSON")
    text = format_tool_call("web_search", {"query": "q"}, "llama3_json")
    [back] = parse_tool_calls(text, "native")  # native reads the dialect from the text
    assert (back.name, back.arguments) == ("web_search", {"query": "q"})
    [tagged] = parse_tool_calls(QWEN_CALL, "native")
    assert tagged.name == "web_search" and tagged.ok


def test_native_graph_validates_and_compiles(tmp_path):
    import shutil

    from matpo_graph.cli import main

    root = Path(__file__).resolve().parents[2] / "graphs"
    shutil.copytree(root / "prompts", tmp_path / "prompts")
    text = (root / "deep_search.yaml").read_text().replace("tool_call_format: hermes", "tool_call_format: native")
    assert "tool_call_format: native" in text
    (tmp_path / "g.yaml").write_text(text)
    assert main(["validate", str(tmp_path / "g.yaml")]) == 0
    assert main(["compile", str(tmp_path / "g.yaml"), "-o", str(tmp_path / "out")]) == 0
    assert '"tool_call_format": "native"' in (tmp_path / "out" / "program.json").read_text()
