"""The trainer's logprobs under a restricted vocabulary (rollout.allowed_token_ids) are the engine's:
a softmax renormalised over the allowed tokens, at the rollout temperature."""

import pytest
import torch

from trainer.contract import Hyper
from trainer.model.policy import TrainSample, forward_response, load_policy, restrict_logits

TEMPERATURE = 0.7
ALLOWED = [220, 64, 65, 66, 151645]


@pytest.fixture(scope="module")
def policy(tiny_model):
    return load_policy(tiny_model).eval()


def sample(prompt: list[int], response: list[int]) -> TrainSample:
    return TrainSample(
        input_ids=prompt + response,
        prompt_len=len(prompt),
        loss_mask=torch.ones(len(response)),
        rollout_logprobs=torch.zeros(len(response)),
        advantage=0.0,
    )


def test_masked_logprobs_match_a_softmax_renormalised_over_the_allowed_tokens(policy):
    prompt, response = [100, 200, 300, 400], [64, 66, 151645]
    s = sample(prompt, response)
    with torch.no_grad():
        out = forward_response(policy, [s], TEMPERATURE, with_entropy=True, allowed_token_ids=ALLOWED)
        full = forward_response(policy, [s], TEMPERATURE, with_entropy=False).logprobs[0]
        logits = policy(input_ids=torch.tensor([prompt + response])).logits[0].float() / TEMPERATURE
    rows = logits[len(prompt) - 1 : len(prompt) + len(response) - 1][:, ALLOWED]
    expected = torch.log_softmax(rows, dim=-1)[torch.arange(len(response)), [ALLOWED.index(t) for t in response]]
    torch.testing.assert_close(out.logprobs[0], expected, rtol=1e-4, atol=1e-4)
    # renormalised: strictly above the full-vocabulary logprob, and a finite entropy of at most log(|allowed|)
    assert bool((out.logprobs[0] > full).all())
    ent = out.entropy[0]
    assert bool(torch.isfinite(ent).all()) and bool((ent <= torch.log(torch.tensor(len(ALLOWED))) + 1e-5).all())


def test_masked_entropy_has_finite_gradients(policy):
    logits = torch.randn(3, 10, requires_grad=True)
    logp = torch.log_softmax(restrict_logits(logits, [1, 4, 7]), dim=-1)
    ent = -(logp.exp() * logp.masked_fill(~torch.isfinite(logp), 0.0)).sum()
    ent.backward()
    assert bool(torch.isfinite(logits.grad).all())
    assert restrict_logits(logits, None) is logits


def test_hyper_carries_allowed_token_ids():
    assert Hyper.model_validate({"allowed_token_ids": [1, 2]}).allowed_token_ids == [1, 2]
    assert Hyper().allowed_token_ids is None
    with pytest.raises(ValueError):
        Hyper.model_validate({"allowed_token_ids": []})
