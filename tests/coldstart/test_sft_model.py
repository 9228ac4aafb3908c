"""The warm-up's split forward (frozen, cached lower layers) against the model's own forward."""

from __future__ import annotations

import pytest

from matpo_graph.coldstart.sft_data import SFTExample


def example(key, ids, trained_from):
    return SFTExample(key, "r", tuple(ids), tuple(int(i >= trained_from) for i in range(len(ids))))


@pytest.fixture(scope="module")
def batch(chat):
    a = chat.encode("<|im_start|>user\nWho wrote The Amber Ledger?<|im_end|>\n<|im_start|>assistant\nOrla Venn wrote it.<|im_end|>")
    b = chat.encode("<|im_start|>user\nWhere?<|im_end|>\n<|im_start|>assistant\nIn Tarnholm, a city by the sea.<|im_end|>")
    return [example("a", a, len(a) - 6), example("b", b, len(b) - 9)]


def reference_loss(model, ex):
    import torch

    ids = torch.tensor([ex.token_ids])
    logits = model(input_ids=ids).logits[0, :-1]
    mask = torch.tensor(ex.loss_mask[1:], dtype=torch.bool)
    return float(torch.nn.functional.cross_entropy(logits[mask], ids[0, 1:][mask], reduction="sum")), int(mask.sum())


@pytest.mark.parametrize("train_layers", [0, 10])
def test_split_forward_matches_the_plain_forward(model_dir, batch, train_layers):
    import torch

    from matpo_graph.coldstart.sft_model import SFTModel

    m = SFTModel(model_dir, train_layers=train_layers)
    m.model.eval()
    with torch.no_grad():
        for ex in batch:
            got, n = m.loss_sum([ex])
            want, k = reference_loss(m.model, ex)
            assert n == k == ex.trained_tokens
            assert float(got) == pytest.approx(want, rel=1e-4)
        padded, n = m.loss_sum(batch)  # right-padded micro-batch: same sum as one by one
        assert n == sum(ex.trained_tokens for ex in batch)
        assert float(padded) == pytest.approx(sum(reference_loss(m.model, ex)[0] for ex in batch), rel=1e-4)
        cached, _ = m.loss_sum(batch)  # second pass reads the frozen layers' cache (when there is one)
        assert float(cached) == pytest.approx(float(padded), rel=1e-5)


def test_frozen_layers_get_no_gradient_and_trained_ones_do(model_dir, batch):
    from matpo_graph.coldstart.sft_model import SFTModel

    m = SFTModel(model_dir, train_layers=3)
    loss, _ = m.loss_sum(batch)
    loss.backward()
    layers = m.model.model.layers
    assert all(p.grad is None for p in layers[0].parameters())
    assert all(p.grad is not None for p in layers[-1].parameters())
    assert m.model.model.embed_tokens.weight.grad is None
    assert m.num_trainable() == sum(p.numel() for layer in layers[-3:] for p in layer.parameters()) + m.model.model.norm.weight.numel()


@pytest.mark.parametrize("train_layers", [0, 4])
def test_shared_prefix_gives_the_same_loss_and_gradients_as_whole_examples(model_dir, chat, train_layers):
    """Running a common system prompt once for several examples changes the cost, not the math."""
    import torch

    from matpo_graph.coldstart.sft_model import SFTModel

    system = "<|im_start|>system\nYou look facts up on the web and answer in one short line.<|im_end|>\n"
    texts = ["<|im_start|>user\nWho wrote X?<|im_end|>\n<|im_start|>assistant\nOrla Venn.<|im_end|>",
             "<|im_start|>user\nWhere is Rook Press based?<|im_end|>\n<|im_start|>assistant\nIn Tarnholm.<|im_end|>",
             "<|im_start|>user\nWhen?<|im_end|>\n<|im_start|>assistant\nIn 1790, I think.<|im_end|>"]
    prompt = chat.encode(system)
    batch = []
    for i, text in enumerate(texts):
        ids = chat.encode(system + text)
        assert ids[: len(prompt)] == prompt
        batch.append(example(f"e{i}", ids, len(ids) - 5))
    batch.append(example("other", chat.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>"), 8))
    batch.append(example("last-token", batch[0].token_ids[: len(prompt) + 3], len(prompt) + 2))  # a prefix of e0

    def run(share_prefix):
        m = SFTModel(model_dir, train_layers=train_layers, share_prefix=share_prefix)
        m.model.eval()
        shared, rest = m._prefix_groups(batch)
        loss, n = m.loss_sum(batch)
        loss.backward()
        return float(loss.detach()), n, [p.grad.clone() for p in m.trainable], shared, rest

    whole, n_whole, g_whole, none, _ = run(0)
    shared_loss, n_shared, g_shared, groups, rest = run(8)
    assert none == [] and len(groups) == 1 and len(groups[0][0]) == 4 and [e.key for e in rest] == ["other"]
    assert n_shared == n_whole == sum(ex.trained_tokens for ex in batch)
    assert shared_loss == pytest.approx(whole, rel=1e-4)
    for a, b in zip(g_shared, g_whole):
        assert float((a - b).norm()) <= 1e-3 * float(b.norm())
