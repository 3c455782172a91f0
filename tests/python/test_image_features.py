"""Images encoded once per segment of micro-batches (trainer/model/image_features.py): the same
logprobs and gradients as encoding them in every micro-batch, far fewer tower calls, segments bounded
by the token budget, and the switch's bad value named."""

import pytest
import torch

from trainer.contract import Hyper, Sample
from trainer.model import image_features, policy as model_mod
from trainer.model.image_features import _Image, segments
from trainer.model.policy import VisionProcessor, load_policy, prepare_sample
from trainer.step.gradients import NoProgress, accumulate_gradients, with_old_logprobs
from tempo_common.blobs import BlobStore

RED, BLUE, GREEN = ((64, 48), (200, 30, 30)), ((40, 90), (20, 30, 220)), ((56, 56), (30, 200, 30))


@pytest.fixture(scope="module")
def policy(tiny_model):
    return load_policy(tiny_model)


@pytest.fixture
def groups(samples, policy, tiny_model):
    """Three groups of three samples, each group showing its own diagram (one sample two of them);
    one sample without images."""
    blobs, vision = BlobStore(samples.root), VisionProcessor(tiny_model, policy.config)
    refs = []
    for g, picture in enumerate((RED, BLUE, GREEN)):
        for k in range(3):
            pictures = [picture, RED] if (g, k) == (2, 1) else [picture]
            refs.append(samples.sample(f"g{g}/{k}", seed=3 * g + k, pictures=pictures, response_len=4 + k))
    refs.append(samples.sample("text", seed=99, response_len=6))
    return [
        prepare_sample(Sample.model_validate(blobs.get_json(r["ref"])), 1.0 - 0.3 * i, blobs, vision)
        for i, r in enumerate(refs)
    ]


def _step(policy, batch, budget: int, once: str, monkeypatch, packed: bool):
    monkeypatch.setenv("TEMPO_RL_VISION_ONCE", once)
    monkeypatch.setattr(model_mod, "packs", lambda model: packed)
    calls = []
    hook = policy.model.visual.register_forward_pre_hook(lambda m, a: calls.append(1))
    try:
        hyper = Hyper(micro_batch_tokens=budget)
        policy.zero_grad(set_to_none=True)
        scored = with_old_logprobs(policy, batch, hyper)
        metrics = accumulate_gradients(policy, scored, hyper, NoProgress())
    finally:
        hook.remove()
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    return torch.cat([s.old_logprobs for s in scored]), float(metrics["train/loss"]), grads, len(calls)


@pytest.mark.parametrize(
    "packed,share", [(False, 2), (True, 2), (True, 0)], ids=["padded", "packed", "packed-a-segment-a-micro-batch"]
)
def test_encoded_once_gives_the_logprobs_and_gradients_of_encoding_in_every_micro_batch(
    policy, groups, monkeypatch, packed, share
):
    monkeypatch.setattr(image_features, "SEGMENT_TOKENS_PER_BUDGET", share)  # 0: each new image, a new segment
    budget = 2 * max(s.n_tokens for s in groups)  # a few micro-batches, a group's samples in several
    logps, loss, grads, calls = _step(policy, groups, budget, "0", monkeypatch, packed)
    logps1, loss1, grads1, calls1 = _step(policy, groups, budget, "1", monkeypatch, packed)
    assert calls1 < calls, (calls1, calls)
    assert torch.allclose(logps, logps1, atol=1e-5), (logps - logps1).abs().max()
    assert abs(loss - loss1) < 1e-5 * max(abs(loss), 1.0)
    assert grads.keys() == grads1.keys() and any(n.startswith("model.visual.") for n in grads)
    worst = max(((grads[n] - grads1[n]).abs().max() / grads[n].abs().max().clamp_min(1e-12)).item() for n in grads)
    assert worst < 1e-4, f"encoding once moved a gradient by {worst:.2e} (relative)"


def _batch(*keys_patches):
    """A micro-batch of fake samples, one image each: (key, patches)."""
    from types import SimpleNamespace

    out = []
    for key, patches in keys_patches:
        vision = SimpleNamespace(pixel_values=torch.zeros(patches, 1), image_grid_thw=torch.tensor([[1, 1, patches]]))
        out.append(SimpleNamespace(vision=vision, image_keys=(key,)))
    return out


def test_a_segment_holds_at_most_its_share_of_image_tokens(monkeypatch):
    monkeypatch.setattr(image_features, "SEGMENT_TOKENS_PER_BUDGET", 1)
    # merge 2: an image of 40 patches is 10 merged tokens; budget 25 merged tokens a segment
    batches = [
        _batch(("a", 40), ("b", 40)),
        _batch(("a", 40)),
        _batch(("c", 40)),
        _batch(("d", 200)),
        _batch(("d", 200)),
    ]
    assert segments(batches, 2, 25) == [range(0, 2), range(2, 3), range(3, 5)], "a repeat costs nothing; too big: alone"
    assert _Image(torch.zeros(6, 1), torch.tensor([1, 2, 3])).patches == 6


def test_a_bad_switch_value_is_named(policy, monkeypatch):
    monkeypatch.setenv("TEMPO_RL_VISION_ONCE", "yes")
    with pytest.raises(ValueError, match="TEMPO_RL_VISION_ONCE='yes'"):
        image_features.applies(policy)
    monkeypatch.setenv("TEMPO_RL_VISION_ONCE", "auto")
    assert image_features.applies(policy) is False, "auto: only on a GPU"
