"""The LM head runs only where the loss mask is 1: a multi-turn response's observation tokens (mask 0)
get logprob 0 and entropy 0, and every mask-1 token gets exactly the logprob of the full computation."""

import pytest
import torch

from trainer.model import lm_head, policy as model_mod
from trainer.model.policy import TrainSample, forward_response, load_policy

TEMPERATURE = 0.6


@pytest.fixture(scope="module")
def policy(tiny_model):
    return load_policy(tiny_model).eval()


def test_mask_zero_positions_skip_the_lm_head_and_mask_one_positions_match_the_full_softmax(policy, monkeypatch):
    prompt = [100, 200, 300, 400]
    response = [64, 65, 151645, 198, 151644, 872, 66, 67, 151645]  # turn, observation (mask 0), turn
    mask = torch.tensor([1, 1, 1, 0, 0, 0, 1, 1, 1], dtype=torch.float32)
    s = TrainSample(
        input_ids=prompt + response,
        prompt_len=len(prompt),
        loss_mask=mask,
        rollout_logprobs=torch.zeros(len(response)),
        advantage=0.0,
    )
    other = TrainSample(
        input_ids=prompt + response[:3],
        prompt_len=len(prompt),
        loss_mask=torch.ones(3),
        rollout_logprobs=torch.zeros(3),
        advantage=0.0,
    )
    rows_seen = []
    real = model_mod.linear_logprobs
    monkeypatch.setattr(
        model_mod, "linear_logprobs", lambda hidden, *a: rows_seen.append(hidden.shape[0]) or real(hidden, *a)
    )
    monkeypatch.setattr(lm_head, "CHUNK_ROWS", 2)  # several chunks, one of them partial
    with torch.no_grad():
        out = forward_response(policy, [s, other], TEMPERATURE, with_entropy=True)
        logits = policy(input_ids=torch.tensor([prompt + response])).logits[0].float() / TEMPERATURE
    assert rows_seen == [int(mask.sum()) + 3], "only mask-1 positions reach the LM head"
    full = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)[torch.arange(len(response)), response]
    keep = mask > 0
    torch.testing.assert_close(out.logprobs[0][keep], full[keep], rtol=1e-5, atol=1e-5)
    assert out.logprobs[0][~keep].tolist() == [0.0, 0.0, 0.0]
    assert out.entropy[0][~keep].tolist() == [0.0, 0.0, 0.0] and bool((out.entropy[0][keep] > 0).all())
    assert [len(x) for x in out.logprobs] == [len(response), 3]
