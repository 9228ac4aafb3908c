"""Incremental chat-template ids with the real SmolLM2 tokenizer: equal to what the template gives."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matpo_graph.core.rollout import ChatMessage
from matpo_graph.runtime.chat import ChatTemplateError, ChatTokenizer
from matpo_graph.runtime.context import ContextBuilder
from matpo_graph.runtime.policy import Generation

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=0, max_size=40)
_messages = st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), _text), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(system=_text, rest=_messages)
def test_chat_prompt_and_append_ids_equal_template(chat, system, rest):
    messages = [{"role": "system", "content": system}] + [{"role": r, "content": c} for r, c in rest]
    assert chat.prompt_ids(messages) == chat.template_ids(messages)
    head, tail = messages[:1], messages[1:]
    assert chat.prompt_ids(head) + chat.append_ids(tail) == chat.template_ids(messages)


def test_chat_generation_prompt_and_closing(chat):
    assert chat.decode(chat.generation_prompt_ids, skip_special_tokens=False) == "<|im_start|>assistant\n"
    eos = min(chat.eos_token_ids)
    assert chat.closing_after([5, eos]) == "\n"
    assert chat.closing_after([5, 6]) == "<|im_end|>\n"  # stopped without end-of-turn: close it
    assert chat.assistant_content(chat.encode("hi there") + [eos]) == "hi there"


def test_chat_without_per_message_mode_gives_the_same_ids(chat):
    whole = copy.copy(chat)
    whole.per_message = False
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "a\n\nb"},
        {"role": "assistant", "content": "c"},
    ]
    assert whole.prompt_ids(messages) == chat.prompt_ids(messages) == chat.template_ids(messages)
    assert whole.append_ids(messages[1:], pending_closing="\n") == chat.append_ids(messages[1:], pending_closing="\n")


def test_chat_tokenizer_without_template_is_refused(chat):
    class NoTemplate:
        chat_template = None

    with pytest.raises(ChatTemplateError, match="no chat template"):
        ChatTokenizer(NoTemplate())


def test_context_builder_truncated_generation_is_closed_untrained(chat):
    ctx = ContextBuilder(chat, [ChatMessage(role="system", content="S"), ChatMessage(role="user", content="Q")])
    cut = chat.encode("an unfinished")  # no end-of-turn token: stopped by max_tokens
    ctx.add_generation(Generation(token_ids=cut, logprobs=[-1.0] * len(cut), finish_reason="length"))
    ctx.add_messages([ChatMessage(role="user", content="go on", kind="instruction")])
    plain = [{"role": m.role, "content": m.content} for m in ctx.messages]
    assert ctx.token_ids == chat.template_ids(plain)
    assert sum(ctx.loss_mask) == len(cut) and ctx.logprobs.count(-1.0) == len(cut)
    end = ctx.token_ids.index(2, ctx.final_prompt_length)  # the <|im_end|> added after the cut turn
    assert ctx.loss_mask[end] == 0


def test_context_builder_fit_for_drops_latest_messages(chat):
    ctx = ContextBuilder(chat, [ChatMessage(role="system", content="S"), ChatMessage(role="user", content="Q")])
    start = len(ctx)
    reply = chat.encode("ok") + [2]
    ctx.add_generation(Generation(token_ids=reply, logprobs=[-0.1] * len(reply)))
    ctx.add_messages([ChatMessage(role="user", content="word " * 200, kind="tool_result")])
    note = [ChatMessage(role="user", content="Summarise.", kind="instruction")]
    assert ctx.fit_for(note, limit=len(ctx) + 50)  # fits without dropping
    assert ctx.messages[-1].kind == "tool_result"
    assert ctx.fit_for(note, limit=start + 40)  # the long result must go; the reply stays
    assert [m.kind for m in ctx.messages][-1] == "generated" and sum(ctx.loss_mask) == len(reply)
    assert not ctx.fit_for(note, limit=start)  # not even the prompt fits: nothing changes
    assert [m.kind for m in ctx.messages][-1] == "generated"
