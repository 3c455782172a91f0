"""Rollout routing replay (R3) on CPU: vLLM's routed-experts rows stitched per position, and the tiny
MoE model's forward routed to them (trainer/model/routing_replay.py)."""

import numpy as np
import pytest
import torch

from trainer.model.policy import SampleInvalid, TrainSample, forward_response, prepare_sample
from trainer.model.routing_replay import (
    NO_ROUTE,
    RoutingMismatch,
    decode_routed_experts,
    encode_routed_experts,
    model_routing_shape,
    moe_routers,
    replay_routing,
    sequence_routes,
)
from trainer.generators.tiny_moe_model import build_tiny_moe_model

L, K, E = 2, 2, 8


def rows(n, seed):
    return np.random.default_rng(seed).integers(0, E, size=(n, L, K), dtype=np.uint8)


def test_vllm_encoding_round_trips():
    r = rows(5, 0)
    back = decode_routed_experts(encode_routed_experts(r))
    assert back.dtype == np.uint8 and np.array_equal(back, r)
    with pytest.raises(RoutingMismatch, match="base64"):
        decode_routed_experts("not base64!")
    with pytest.raises(RoutingMismatch, match="shape"):
        decode_routed_experts(encode_routed_experts(np.zeros((3, 4), dtype=np.uint8)))


def test_one_turn_rows_cover_the_prompt_and_all_but_the_last_sampled_token():
    prompt, gen = 6, 4
    r = rows(prompt + gen - 1, 1)
    routes = sequence_routes([encode_routed_experts(r)], prompt, [1] * gen, [gen], num_layers=L, top_k=K, num_experts=E)
    assert routes.shape == (prompt + gen, L, K)
    assert np.array_equal(routes[:-1], r)
    assert (routes[-1] == NO_ROUTE).all(), "the last sampled token was never forwarded"


def test_turns_stitch_each_position_from_the_first_call_it_went_through():
    # turn 0: 3 generated + synthetic EOS + 4 observation tokens; turn 1: 2 generated, then a synthetic EOS at the end
    prompt = 5
    mask = [1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0]
    call0 = rows(prompt + 3 - 1, 2)  # positions 0..6
    call1 = rows(prompt + 8 + 2 - 1, 3)  # positions 0..13: the whole history again
    call1_incremental = call1[len(call0) :]  # what a client setting routed_experts_prompt_start would get
    for second in (call1, call1_incremental):
        routes = sequence_routes(
            [encode_routed_experts(call0), encode_routed_experts(second)],
            prompt,
            mask,
            [3, 2],
            num_layers=L,
            top_k=K,
            num_experts=E,
        )
        assert np.array_equal(routes[:7], call0), "the prompt and turn 0's first tokens: from turn 0's call"
        # turn 0's last token, its synthetic EOS, the observation, turn 1's tokens but its last: from turn 1's call
        assert np.array_equal(routes[7:14], call1[7:14])
        assert (routes[14:] == NO_ROUTE).all(), "turn 1's last token and the synthetic EOS after it have no row"


def test_misfitting_rows_are_refused():
    mask, prompt = [1, 1, 1], 4
    with pytest.raises(RoutingMismatch, match="5 routing rows, expected 6"):
        sequence_routes([rows(5, 0)], prompt, mask, num_layers=L, top_k=K, num_experts=E)
    with pytest.raises(RoutingMismatch, match="3 layers of top-2|2 layers of top-2"):
        sequence_routes([np.zeros((6, 3, 2), np.uint8)], prompt, mask, num_layers=L, top_k=K, num_experts=E)
    with pytest.raises(RoutingMismatch, match="outside 0..7"):
        sequence_routes([np.full((6, L, K), 9, np.uint8)], prompt, mask, num_layers=L, top_k=K, num_experts=E)
    with pytest.raises(RoutingMismatch, match="generated token counts"):
        sequence_routes([rows(6, 0)], prompt, mask, [2], num_layers=L, top_k=K, num_experts=E)


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    from trainer.model.policy import load_policy

    path = build_tiny_moe_model(tmp_path_factory.mktemp("moe") / "m", seed=0)
    return path, load_policy(path)


def _ids(n, seed=0):
    return torch.randint(0, 151000, (1, n), generator=torch.Generator().manual_seed(seed))


def test_the_model_is_routed_as_told_and_its_own_routes_change_nothing(moe):
    _, model = moe
    assert model_routing_shape(model) == (L, K, E) and [i for i, _ in moe_routers(model)] == [0, 1]
    ids = _ids(12)
    with torch.no_grad(), replay_routing(model, None, record=True) as own:
        plain = model(input_ids=ids).logits
    own_routes = torch.stack([own.chosen[0], own.chosen[1]], dim=1)  # (tokens, layers, top_k)
    with torch.no_grad(), replay_routing(model, own_routes.to(torch.int16), record=True) as st:
        same = model(input_ids=ids).logits
    assert torch.allclose(plain, same, atol=1e-6, rtol=0) and st.replayed_tokens == 12 * L and st.flipped == 0

    forced = torch.from_numpy(rows(12, 7).astype(np.int16))
    forced[0] = NO_ROUTE  # no row: the model's own router
    forced[:, :, 1] = (forced[:, :, 0] + 1) % E  # two distinct experts per token
    forced[0] = NO_ROUTE
    with torch.no_grad(), replay_routing(model, forced, record=True) as st:
        other = model(input_ids=ids).logits
    for layer in range(L):
        assert torch.equal(st.chosen[layer][1:], forced[1:, layer].long())
        assert torch.equal(st.chosen[layer][0], own.chosen[layer][0])
    assert not torch.allclose(plain[0, 1:], other[0, 1:], atol=1e-6)
    assert torch.allclose(plain[0, 0], other[0, 0], atol=1e-6), (
        "position 0 sees only itself and was routed by the model"
    )


def test_replayed_weights_are_the_trainers_softmax_over_the_replayed_experts_and_train_the_router(moe):
    _, model = moe
    gate = dict(moe_routers(model))[1]
    captured = {}
    handle = gate.register_forward_hook(lambda m, a, out: captured.update(logits=out[0]), prepend=True)
    forced = torch.from_numpy(rows(10, 3).astype(np.int16))
    forced[:, :, 1] = (forced[:, :, 0] + 3) % E
    out = {}
    handle2 = None
    try:
        with replay_routing(model, forced) as st:
            handle2 = gate.register_forward_hook(lambda m, a, o: out.update(weights=o[1], ids=o[2]))
            model.zero_grad(set_to_none=True)
            model(input_ids=_ids(10, 1)).logits.float().logsumexp(-1).sum().backward()
    finally:
        handle.remove()
        if handle2 is not None:
            handle2.remove()
    logits = captured["logits"].detach().float()
    ids = forced[:, 1].long()
    expected = torch.softmax(logits.gather(-1, ids), dim=-1)  # softmax restricted to the replayed experts
    assert torch.equal(out["ids"], ids)
    assert torch.allclose(out["weights"].detach().float(), expected, atol=1e-6)
    assert gate.weight.grad is not None and gate.weight.grad.abs().sum() > 0
    assert st.replayed_tokens == 10 * L


def _sample(prompt_len, gen, seed):
    ids = _ids(prompt_len + gen, seed)[0].tolist()
    return TrainSample(
        input_ids=ids,
        prompt_len=prompt_len,
        loss_mask=torch.ones(gen),
        rollout_logprobs=torch.zeros(gen),
        advantage=0.0,
    )


def test_forward_response_replays_per_sample_in_padded_and_packed_batches(moe):
    _, model = moe
    a, b = _sample(7, 5, 1), _sample(4, 3, 2)
    for s, seed in ((a, 11), (b, 12)):
        r = torch.from_numpy(rows(s.n_tokens, seed).astype(np.int16))
        r[:, :, 1] = (r[:, :, 0] + 1) % E
        r[-1] = NO_ROUTE
        s.routes = r
    with torch.no_grad():
        alone = [forward_response(model, [s], 1.0, with_entropy=False, packed=False).logprobs[0] for s in (a, b)]
        padded = forward_response(model, [a, b], 1.0, with_entropy=False, packed=False).logprobs
        packed = forward_response(model, [a, b], 1.0, with_entropy=False, packed=True).logprobs
        a_free = TrainSample(**{**a.__dict__, "routes": None})
        free = forward_response(model, [a_free], 1.0, with_entropy=False, packed=False).logprobs[0]
    for x, y, z in zip(alone, padded, packed, strict=False):
        assert torch.allclose(x, y, atol=1e-5) and torch.allclose(x, z, atol=1e-5)
    assert not torch.allclose(alone[0], free, atol=1e-5), "the replayed experts changed the logprobs"


def test_prepare_sample_stitches_the_samples_routing_or_refuses_a_sample_without(moe, tmp_path):
    from tempo_common.blobs import BlobStore
    from trainer.contract import Sample

    prompt, mask = [151644, 872, 198, 3838], [1, 1, 1, 0, 0, 1, 1]
    call0, call1 = rows(len(prompt) + 3 - 1, 1), rows(len(prompt) + 5 + 2 - 1, 2)
    doc = dict(
        episode_id="r/0/0/0",
        run_id="r",
        step=0,
        prompt_index=0,
        sample_index=0,
        group_id="r/0/0",
        prompt_ids=prompt,
        response_ids=[11, 12, 151645, 198, 13, 14, 15],
        loss_mask=mask,
        rollout_logprobs=[-1.0, -1.0, -1.0, 0.0, 0.0, -1.0, -1.0],
        reward=1.0,
        status="COMPLETED",
        turns=[
            {"engine": "e", "generated_tokens": 3, "observation_tokens": 2},
            {"engine": "e", "generated_tokens": 2, "observation_tokens": 0},
        ],
        routed_experts=[encode_routed_experts(call0), encode_routed_experts(call1)],
    )
    s = prepare_sample(Sample.model_validate(doc), 0.5, BlobStore(tmp_path), None, routing=(L, K, E))
    assert s.routes.shape == (11, L, K) and torch.equal(s.routes[:6], torch.from_numpy(call0.astype(np.int16)))
    assert (
        torch.equal(s.routes[6:10], torch.from_numpy(call1[6:10].astype(np.int16))) and (s.routes[10] == NO_ROUTE).all()
    )
    assert prepare_sample(Sample.model_validate(doc), 0.5, BlobStore(tmp_path), None).routes is None, (
        "replay off: no routes"
    )
    with pytest.raises(SampleInvalid, match="no routed experts.*--enable-return-routed-experts"):
        prepare_sample(
            Sample.model_validate({**doc, "routed_experts": None}), 0.5, BlobStore(tmp_path), None, routing=(L, K, E)
        )
    with pytest.raises(SampleInvalid, match="routing rows"):
        prepare_sample(
            Sample.model_validate({**doc, "routed_experts": [encode_routed_experts(call0[:-1]), None]}),
            0.5,
            BlobStore(tmp_path),
            None,
            routing=(L, K, E),
        )


def test_train_step_honours_routing_replay(moe, tmp_path, tiny_model):
    """rollout.routing_replay end to end in train_step: rollout logprobs taken under forced experts are
    what the trainer recomputes with replay on (|diff| ~ 0), not without; a dense policy is refused."""
    import json

    from trainer.contract import TrainStepInput
    from trainer.step.grpo import ContractError
    from trainer.step.train_step import Trainer

    path, model = moe
    blobs = tmp_path / "blobs"
    refs = []
    for i in range(2):
        prompt_len, gen = 6 + i, 5
        s = _sample(prompt_len, gen, 20 + i)
        routes = rows(prompt_len + gen - 1, 30 + i)
        routes[:, :, 1] = (routes[:, :, 0] + 1) % E
        s.routes = torch.from_numpy(np.concatenate([routes, np.full((1, L, K), NO_ROUTE)]).astype(np.int16))
        with torch.no_grad():
            lp = forward_response(model, [s], 1.0, with_entropy=False).logprobs[0].tolist()
        doc = {
            "schema_version": 1,
            "episode_id": f"r/0/0/{i}",
            "run_id": "r",
            "step": 0,
            "prompt_index": 0,
            "sample_index": i,
            "group_id": "r/0/0",
            "prompt_ids": s.input_ids[:prompt_len],
            "response_ids": s.input_ids[prompt_len:],
            "loss_mask": [1] * gen,
            "rollout_logprobs": lp,
            "images": [],
            "reward": float(i),
            "status": "COMPLETED",
            "turns": [{"engine": "e", "generated_tokens": gen}],
            "routed_experts": [encode_routed_experts(routes)],
        }
        (blobs / "named" / "samples" / "r" / "0" / "0").mkdir(parents=True, exist_ok=True)
        (blobs / "named" / "samples" / "r" / "0" / "0" / f"{i}.json").write_text(json.dumps(doc))
        refs.append({"ref": f"blob:named/samples/r/0/0/{i}.json", "reward": float(i), "group_id": "r/0/0"})

    def step(replay: bool, model_path=path, run="run"):
        inp = TrainStepInput.model_validate(
            {
                "run_id": "r",
                "step": 0,
                "run_dir": str(tmp_path / f"{run}-{replay}"),
                "blob_store": str(blobs),
                "model_path": str(model_path),
                "samples": refs,
                "data_cursor": {"epoch": 0, "cursor": 1},
                "hyper": {"lr": 1e-3, "routing_replay": replay},
            }
        )
        return Trainer(device="cpu").train_step(inp).metrics

    on, off = step(True), step(False)
    assert on["train/train_rollout_logprob_abs_diff"] < 1e-5 < off["train/train_rollout_logprob_abs_diff"]
    assert on["train/routing_replay_coverage"] == pytest.approx(21 / 23) and "train/routing_replay_coverage" not in off
    with pytest.raises(ContractError, match="no MoE layers"):
        step(True, model_path=tiny_model, run="dense")
