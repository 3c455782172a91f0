"""Rollout routing replay (R3): the trainer's MoE forward routes each token to the experts the engine
routed it to when it sampled.

R3 (arXiv 2510.11370; verl's `router_replay.mode: R3`, slime, vime PR #120) — an MoE policy's logprobs
move between the engine and the trainer not only through kernels and weight versions but through
routing: a token whose top-k flips on a 1e-6 difference of router logits goes through other experts.
R3 records the engine's top-k per token and layer and replays it in training:

- the *experts* of a token are the engine's (per layer, the k ids it chose);
- their *weights* are recomputed from the trainer's own router logits over the replayed experts:
  softmax over all experts, gathered at the replayed ids, renormalised over them when the model
  renormalises its top-k (`norm_topk_prob`; Qwen3-VL-MoE and Qwen3.5-MoE always do) — which is the
  softmax restricted to the replayed experts, the paper's gate g_i = exp(s_i)·1[i∈I_infer] /
  Σ_j exp(s_j)·1[j∈I_infer]. Megatron's patch in verl does the same (`scores.gather(1,
  target_topk_idx)` after the softmax), so the router's weight still gets a gradient;
- a token without replay data (no row: the last sampled token of a generation, which the engine never
  fed forward, a synthetic end-of-turn the episode appended at the end, or every token of a sample
  whose engine returned none) is routed by the trainer's own router.

Prompt tokens are replayed too: vLLM returns their routing (rows from position 0 unless the request
sets `routed_experts_prompt_start`), and every response logprob depends on the prompt's hidden states
through attention, so replaying only the response would leave the prompt's K/V on the trainer's
routing. verl and slime replay the whole sequence likewise.

vLLM 0.32's `routed_experts` (completion choice of `/inference/v1/generate`, `/v1/completions`,
`/v1/chat/completions`): base64 of a NumPy `.npy` file (np.save, no pickle), shape
(rows, num_hidden_layers, num_experts_per_tok), dtype uint8 when the model has at most 256 experts
(uint16 otherwise); row t is the input token at position `routed_experts_prompt_start + t` of
prompt + output (prompt_start 0 by default: the whole prompt), and there are
`len(prompt) + len(output) − 1 − prompt_start` rows — the last sampled token has none, since it was
never forwarded. A layer index is the decoder layer's (dense layers of a model with
`mlp_only_layers` keep an unwritten row). Prefix-cached blocks are returned too (vLLM keeps their
rows in a block store keyed by the KV block hashes). Off unless the server runs with
`--enable-return-routed-experts`, which in vLLM 0.32 needs Model Runner V2 (on CPU: triton-cpu).

An episode of several turns carries one such array per turn (`Sample.routed_experts`, in turn order,
each turn's generate call covering the whole history it was sent). `sequence_routes` stitches them
into one row per position of prompt + response: each position takes the row of the first call it was
an input of — the routing under which its keys and values were first computed, and which the engine
kept for it as long as its block stayed in the prefix cache.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

NO_ROUTE = -1
# HF routers of this form: softmax over all experts, top-k, renormalised when norm_topk_prob (absent
# attribute: always), returning (router_logits, top-k weights, top-k ids).
SOFTMAX_TOPK_ROUTERS = {"Qwen3VLMoeTextTopKRouter", "Qwen3MoeTopKRouter", "Qwen2MoeTopKRouter", "Qwen3_5MoeTopKRouter"}


class RoutingMismatch(ValueError):
    """Routing rows that do not fit the sample or the model (count, layers, top-k, expert ids)."""


def decode_routed_experts(value: str) -> np.ndarray:
    """vLLM's base64 `.npy` → an integer array (rows, layers, top_k)."""
    try:
        array = np.load(io.BytesIO(base64.b64decode(value, validate=True)), allow_pickle=False)
    except (ValueError, OSError) as err:
        raise RoutingMismatch(f"routed_experts is not a base64 .npy array: {err}") from err
    if array.ndim != 3 or not np.issubdtype(array.dtype, np.integer):
        raise RoutingMismatch(
            f"routed_experts has shape {array.shape} and dtype {array.dtype}; expected (rows, layers, top_k) integers"
        )
    return array


def encode_routed_experts(array: np.ndarray) -> str:
    """The inverse of decode_routed_experts, as vLLM writes it (tests and the bench's stand-in engine)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _generated_runs(loss_mask: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) of each run of mask-1 tokens: a turn's generated tokens (an episode's stitching puts
    only generated tokens at mask 1, and at least one mask-0 token — a synthetic EOS or an observation —
    between two turns)."""
    runs, start = [], None
    for i, m in enumerate([*loss_mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


def sequence_routes(
    per_turn: Sequence[str | np.ndarray | None],
    prompt_len: int,
    loss_mask: Sequence[int],
    generated_tokens: Sequence[int] | None = None,
    *,
    num_layers: int,
    top_k: int,
    num_experts: int,
) -> np.ndarray:
    """One routing row per position of prompt + response, (prompt_len + len(loss_mask), layers, top_k)
    int16, NO_ROUTE where no engine row exists.

    per_turn: each turn's `routed_experts` (base64 .npy, an array, or None for a turn the engine
    returned none for), in turn order. Turn k was generated from the prompt and the response before its
    first generated token (`input_k` tokens) and returned `input_k + gen_k − 1` rows from position 0,
    or, for a client that sets `routed_experts_prompt_start` to the rows it already holds, only the rows
    after the previous turn's. Either is recognised by its row count; anything else is a RoutingMismatch.
    generated_tokens: the turns' generated token counts (`Sample.turns`), checked against the loss mask."""
    total = prompt_len + len(loss_mask)
    routes = np.full((total, num_layers, top_k), NO_ROUTE, dtype=np.int16)
    runs = _generated_runs(loss_mask)
    if len(per_turn) > len(runs):
        raise RoutingMismatch(f"{len(per_turn)} turns of routing for {len(runs)} generated spans in the response")
    if generated_tokens is not None and [e - s for s, e in runs] != list(generated_tokens):
        raise RoutingMismatch(
            f"the response's generated spans {[e - s for s, e in runs]} are not the turns' generated token counts {list(generated_tokens)}"
        )
    covered = 0  # rows [0, covered) already held
    for k, value in enumerate(per_turn):
        if value is None:
            continue
        rows = decode_routed_experts(value) if isinstance(value, str) else np.asarray(value)
        start, end = runs[k]
        call_end = prompt_len + end - 1  # positions [0, call_end) went through the engine's forward
        if rows.shape[1:] != (num_layers, top_k):
            raise RoutingMismatch(
                f"turn {k}: routing rows of shape {rows.shape[1:]}, the model has {num_layers} layers of top-{top_k}"
            )
        if len(rows) == call_end:
            first = 0
        elif len(rows) == call_end - covered and covered > 0:
            first = covered
        else:
            raise RoutingMismatch(
                f"turn {k}: {len(rows)} routing rows, expected {call_end} (prompt of {prompt_len + start} tokens"
                f" + {end - start} generated − 1)"
                + (f" or {call_end - covered} (after the {covered} already held)" if covered else "")
            )
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= num_experts):
            raise RoutingMismatch(
                f"turn {k}: expert ids {int(rows.min())}..{int(rows.max())} outside 0..{num_experts - 1}"
            )
        if call_end > covered:  # the first call a position was an input of gives its row
            routes[covered:call_end] = rows[covered - first : call_end - first]
            covered = call_end
    return routes


def moe_routers(model: torch.nn.Module) -> list[tuple[int, torch.nn.Module]]:
    """(decoder layer index, router) of each sparse MoE block of the language model, in layer order."""
    inner = model.model
    layers = inner.language_model.layers if hasattr(inner, "language_model") else inner.layers
    found = []
    for i, layer in enumerate(layers):
        gate = getattr(getattr(layer, "mlp", None), "gate", None)
        if gate is None or not hasattr(gate, "top_k") or not hasattr(gate, "num_experts"):
            continue
        if type(gate).__name__ not in SOFTMAX_TOPK_ROUTERS:
            raise NotImplementedError(
                f"routing replay knows softmax top-k routers ({', '.join(sorted(SOFTMAX_TOPK_ROUTERS))}), "
                f"not {type(gate).__name__} of layer {i}"
            )
        found.append((i, gate))
    return found


def model_routing_shape(model: torch.nn.Module) -> tuple[int, int, int] | None:
    """(num_hidden_layers, top_k, num_experts) as the engine's rows are shaped, or None for a dense model."""
    routers = moe_routers(model)
    if not routers:
        return None
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(cfg.num_hidden_layers), int(routers[0][1].top_k), int(routers[0][1].num_experts)


@dataclass
class _ReplayState:
    routes: torch.Tensor | None = None  # (tokens of the forward, layers, top_k), NO_ROUTE where none
    record: bool = False
    chosen: dict[int, torch.Tensor] = field(default_factory=dict)  # layer → (tokens, top_k) ids used
    replayed_tokens: int = 0
    flipped: int = 0  # replayed (token, layer) pairs whose own top-k set differed from the engine's


# The replay in progress, per router module (its forward hook reads it): a model's hooks are installed
# once and stay, and replay_routing only sets what they do.
_ACTIVE: dict[int, tuple[int, _ReplayState]] = {}
_HOOKED = "_tempo_rl_replay_hook"


def install_replay_hooks(model: torch.nn.Module) -> None:
    """One forward hook per router, for the model's life, doing nothing outside a replay_routing block.
    Installed before the decoder layers are compiled (model.for_training): torch.compile does not guard
    on module hooks (torch._dynamo.config.skip_nnmodule_hook_guards), so a hook added to a layer already
    compiled without one is never run — routing would silently not be replayed."""
    for _layer, gate in moe_routers(model):
        if gate.__dict__.get(_HOOKED):
            continue
        gate.register_forward_hook(_dispatch(bool(getattr(gate, "norm_topk_prob", True))))
        gate.__dict__[_HOOKED] = True


def _dispatch(renormalize: bool):
    @torch.compiler.disable
    def hook(module, args, output):
        active = _ACTIVE.get(id(module))
        if active is None:
            return None
        layer, state = active
        if state.routes is None:
            if state.record:
                state.chosen[layer] = output[2].detach().cpu()
            return None
        return _replayed(layer, state, renormalize, output)

    return hook


def _replayed(layer: int, state: _ReplayState, renormalize: bool, output):
    """The router's output with the replayed experts: their weights from its own logits."""
    logits, scores, own = output
    rows = state.routes[:, layer].to(own.device)
    if rows.shape[0] != logits.shape[0]:
        raise RoutingMismatch(f"layer {layer}: {rows.shape[0]} routing rows for a forward of {logits.shape[0]} tokens")
    have = rows[:, 0] >= 0
    ids = torch.where(have[:, None], rows.long(), own)
    weights = torch.softmax(logits, dim=-1, dtype=torch.float).gather(-1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = torch.where(have[:, None], weights.to(scores.dtype), scores)
    with torch.no_grad():
        state.replayed_tokens += int(have.sum())
        state.flipped += int((have & (own.sort(-1).values != ids.sort(-1).values).any(-1)).sum())
        if state.record:
            state.chosen[layer] = ids.detach().cpu()
    return logits, weights, ids


@contextmanager
def replay_routing(model: torch.nn.Module, routes: torch.Tensor | None, record: bool = False) -> Iterator[_ReplayState]:
    """Within the block, every forward of `model` routes token t of layer l to `routes[t, l]` (rows of
    NO_ROUTE: the model's own router). `routes` is (tokens, num_hidden_layers, top_k) in the order the
    MoE blocks see the tokens: the forward's (batch, sequence) flattened row by row. routes None: the
    model's own routing (with `record`, the experts it chose are still kept in `.chosen`)."""
    install_replay_hooks(model)  # a no-op once installed (model.for_training installs them first)
    state = _ReplayState(routes=routes, record=record)
    routers = moe_routers(model)
    previous = {id(gate): _ACTIVE.get(id(gate)) for _, gate in routers}
    for layer, gate in routers:
        _ACTIVE[id(gate)] = (layer, state)
    try:
        yield state
    finally:
        for key, before in previous.items():
            if before is None:
                _ACTIVE.pop(key, None)
            else:
                _ACTIVE[key] = before
