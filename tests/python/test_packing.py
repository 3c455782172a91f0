"""Packed micro-batches (trainer/model/packing.py): bins filled first-fit-decreasing to the token budget,
and one packed row gives the padded path's log-probabilities, entropies and gradients — on the tiny
Qwen3-VL with several images per sample, an image shared by several samples (encoded once), M-RoPE
positions restarting per sample, a multi-turn mask and text-only samples in the same row. (The trainer
packs where varlen attention runs, on a GPU; on the CPU these rows attend through transformers'
packed-sequence mask.)"""

import copy
import dataclasses

import pytest
import torch

from trainer.model import policy as model_mod, packing
from tempo_common.blobs import BlobStore
from trainer.contract import Hyper, Sample
from trainer.model.policy import TrainSample, VisionProcessor, forward_response, load_policy, prepare_sample
from trainer.model.packing import pack_micro_batches
from trainer.step.gradients import with_old_logprobs


def _sample(n: int, name: str, image: str | None = None) -> TrainSample:
    return TrainSample(
        input_ids=list(range(n)),
        prompt_len=1,
        loss_mask=torch.ones(n - 1),
        rollout_logprobs=torch.zeros(n - 1),
        advantage=0.0,
        name=name,
        image_keys=(image,) if image else (),
    )


def test_bins_are_filled_first_fit_decreasing_within_the_budget():
    lengths = [30, 70, 10, 60, 45, 25, 120, 5]
    samples = [_sample(n, f"s{i}") for i, n in enumerate(lengths)]
    bins = pack_micro_batches(samples, 100)
    assert sorted(s.name for b in bins for s in b) == sorted(s.name for s in samples), "every sample exactly once"
    for b in bins:
        assert len(b) == 1 or sum(s.n_tokens for s in b) <= 100, [s.n_tokens for s in b]
        assert [samples.index(s) for s in b] == sorted(samples.index(s) for s in b), "inside a bin: the samples' order"
    assert [s.name for s in bins[0]] == ["s6"], "longer than the budget: alone"
    # first-fit decreasing: 120 | 70+30 | 60+25+10+5 | 45 (a greedy consecutive split needs 6 rows)
    assert [sorted(s.n_tokens for s in b) for b in bins] == [[120], [30, 70], [5, 10, 25, 60], [45]]


def _encodings(bins: list[list[TrainSample]]) -> int:
    return sum(len({s.image_keys for s in b if s.image_keys}) for b in bins)


def test_a_groups_samples_share_bins_so_its_image_is_encoded_fewer_times():
    # by length alone: 45b 45b 10a | 40a 40a 10a 5b 5b — each diagram in both rows
    group_a = [_sample(n, f"a{i}", "blob:a") for i, n in enumerate([40, 10, 40, 10])]
    group_b = [_sample(n, f"b{i}", "blob:b") for i, n in enumerate([5, 45, 5, 45])]
    bins = pack_micro_batches(group_a + group_b, 100)
    assert [sorted(s.name for s in b) for b in bins] == [["b0", "b1", "b2", "b3"], ["a0", "a1", "a2", "a3"]]
    assert _encodings(bins) == 2


def test_on_geo3k_like_steps_a_third_of_the_encodings_for_a_few_more_bins():
    """64 groups of 8 sharing a diagram (Geo3K's diagram sizes, log-normal responses up to 4,000
    tokens), 8,192 tokens a bin: against packing by length alone."""
    import random

    rng = random.Random(0)
    samples, images = [], {}
    for g in range(64):
        prompt = int(min(562_830, rng.lognormvariate(11.5, 0.78)) / 1024) + rng.randint(100, 300)
        for k in range(8):
            samples.append(
                _sample(prompt + int(min(4000, max(50, rng.lognormvariate(6.4, 0.9)))), f"{g}/{k}", f"blob:{g}")
            )
            images[f"{g}/{k}"] = f"blob:{g}"
    grouped = pack_micro_batches(samples, 8192)
    plain = pack_micro_batches([dataclasses.replace(s, image_keys=()) for s in samples], 8192)
    assert sorted(s.name for b in grouped for s in b) == sorted(s.name for s in samples)
    assert all(len(b) == 1 or sum(s.n_tokens for s in b) <= 8192 for b in grouped)
    by_length = sum(len({images[s.name] for s in b}) for b in plain)
    assert _encodings(grouped) < 0.4 * by_length, (_encodings(grouped), by_length)
    assert len(grouped) <= 1.05 * len(plain), (len(grouped), len(plain))


@pytest.fixture(scope="module")
def policy(tiny_model):
    return load_policy(tiny_model).eval()


def _prepared(samples_factory, refs, policy, tiny_model) -> list[TrainSample]:
    blobs = BlobStore(samples_factory.root)
    vision = VisionProcessor(tiny_model, policy.config)
    return [
        prepare_sample(Sample.model_validate(blobs.get_json(r["ref"])), adv, blobs, vision)
        for r, adv in zip(refs, (1.0, -0.5, 0.8, -1.2, 0.3), strict=False)
    ]


@pytest.fixture
def vlm_batch(samples, policy, tiny_model) -> list[TrainSample]:
    red, blue = ((64, 48), (200, 30, 30)), ((40, 90), (20, 30, 220))
    refs = [
        samples.sample("p/0", seed=1, pictures=[red, blue], response_len=7, mask=[1, 1, 0, 0, 1, 1, 1]),
        samples.sample("p/1", seed=2, pictures=[red]),  # the same red blob: encoded once in the packed row
        samples.sample("p/2", seed=3, response_len=4),
        samples.sample("p/3", seed=4, pictures=[blue, red], prompt_len=9, response_len=6),
        samples.sample("p/4", seed=5, prompt_len=3, response_len=8),
    ]
    return _prepared(samples, refs, policy, tiny_model)


def _run(policy, batch, packed: bool):
    policy.zero_grad(set_to_none=True)
    out = forward_response(policy, batch, 0.7, with_entropy=True, packed=packed)
    weights = [torch.linspace(0.5, 1.5, len(lp)) for lp in out.logprobs]
    sum((lp * w).sum() for lp, w in zip(out.logprobs, weights, strict=False)).backward()
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    return [lp.detach() for lp in out.logprobs], [e.detach() for e in out.entropy], grads


def test_a_packed_row_gives_the_padded_logprobs_and_gradients(policy, vlm_batch, monkeypatch):
    encoded = []
    original = policy.model.get_image_features
    monkeypatch.setattr(
        policy.model,
        "get_image_features",
        lambda pv, grid, **kw: encoded.append(grid.shape[0]) or original(pv, grid, **kw),
    )
    packed = _run(policy, vlm_batch, packed=True)
    assert encoded == [2], "two distinct images among the five placeholder blocks, each encoded once"
    padded = _run(policy, vlm_batch, packed=False)
    for a, b, s in zip(packed[0], padded[0], vlm_batch, strict=False):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=f"logprobs of {s.name}")
        assert (a[s.loss_mask == 0] == 0).all()
    for a, b in zip(packed[1], padded[1], strict=False):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert packed[2].keys() == padded[2].keys()
    assert any("visual" in n for n in packed[2]), "the vision tower gets gradients through the packed row"
    for name in padded[2]:
        scale = float(padded[2][name].abs().max()) + 1e-12
        torch.testing.assert_close(packed[2][name], padded[2][name], atol=1e-5 * scale, rtol=1e-4, msg=name)


def test_positions_restart_at_each_sample(policy, vlm_batch):
    kwargs, offsets = packing.packed_inputs(policy, vlm_batch, torch.device("cpu"))
    positions = kwargs["position_ids"]
    assert positions.shape == (4, 1, sum(s.n_tokens for s in vlm_batch))
    assert offsets == [0, *torch.tensor([s.n_tokens for s in vlm_batch]).cumsum(0).tolist()[:-1]]
    for off in offsets:
        assert (positions[:, 0, off] == 0).all(), "every sample starts at position 0 on all four rows"
    text = vlm_batch[2]  # text-only: the three M-RoPE rows are its plain positions
    row = positions[:, 0, offsets[2] : offsets[2] + text.n_tokens]
    assert (row == torch.arange(text.n_tokens)).all()


def test_old_logprobs_come_back_in_the_samples_order(policy, vlm_batch, monkeypatch):
    """Packing reorders samples into bins; the update slices that follow are taken group by group."""
    monkeypatch.setattr(model_mod, "packs", lambda model: True)  # as on a GPU
    hyper = Hyper(micro_batch_tokens=max(s.n_tokens for s in vlm_batch) + 5)
    assert [s.name for b in model_mod.micro_batches(policy, vlm_batch, hyper.micro_batch_tokens) for s in b] != [
        s.name for s in vlm_batch
    ], "the bins reorder the samples"
    out = with_old_logprobs(policy, vlm_batch, hyper)
    assert [s.name for s in out] == [s.name for s in vlm_batch]
    for s, o in zip(vlm_batch, out, strict=False):
        assert o.old_logprobs.shape == (s.response_len,)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; CI has none")
def test_on_a_gpu_varlen_attention_gives_the_padded_sdpa_logprobs():
    """The GPU path — packed rows through torch's varlen flash attention, no mask, decoder layers
    compiled (model.for_training) — against eager padded SDPA, under bf16 autocast, grouped-query
    attention, samples of uneven lengths."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer.model import varlen_attention
    from trainer.model.policy import for_training

    cfg = Qwen2Config(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1024,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        varlen_model = Qwen2ForCausalLM(cfg).train()
    padded_model = Qwen2ForCausalLM(copy.deepcopy(cfg)).cuda().train()  # its own config: SDPA
    padded_model.load_state_dict(varlen_model.state_dict())
    for_training(varlen_model)
    assert varlen_attention.in_use(varlen_model) and not varlen_attention.in_use(padded_model)
    g = torch.Generator().manual_seed(1)
    batch = []
    for i, (n, p) in enumerate([(300, 100), (57, 20), (1000, 400), (129, 5)]):
        ids = torch.randint(0, 1024, (n,), generator=g).tolist()
        batch.append(
            TrainSample(
                input_ids=ids,
                prompt_len=p,
                loss_mask=torch.ones(n - p),
                rollout_logprobs=torch.zeros(n - p),
                advantage=1.0,
                name=f"s{i}",
            )
        )
    outs = []
    for model, packed in ((varlen_model, True), (padded_model, False)):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = forward_response(model, batch, 1.0, with_entropy=False, packed=packed)
        sum(lp.sum() for lp in out.logprobs).backward()
        outs.append(([lp.detach() for lp in out.logprobs], model.model.layers[0].self_attn.q_proj.weight.grad))
    for a, b in zip(outs[0][0], outs[1][0], strict=False):
        torch.testing.assert_close(a, b, atol=0.05, rtol=0.02)
    torch.testing.assert_close(outs[0][1], outs[1][1], atol=0.05 * float(outs[1][1].abs().max()), rtol=0.05)
