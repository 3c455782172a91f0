"""The trainer's memory: bounded by its micro-batch, not by the step's samples (live tensor bytes
measured on the CPU, packed rows as on a GPU); each distinct image of a step processed once; the step's
GPU memory metrics and the allocator's mode while it trains (CUDA faked)."""

import torch

from trainer.contract import Hyper, Sample, TrainStepInput
from trainer.model import policy as model_mod
from trainer.model.policy import VisionProcessor, load_policy, prepare_sample
from trainer.step import memory
from trainer.step.gradients import NoProgress, accumulate_gradients
from trainer.step.memory import LiveTensorBytes, StepMemory, training_allocator
from trainer.step.train_step import Trainer
from tempo_common.blobs import BlobStore


class EachMicroBatch(NoProgress):
    def __init__(self, tracker: LiveTensorBytes):
        self.tracker, self.live = tracker, []

    def heartbeat(self, details: dict) -> None:
        if details.get("phase") == "training":
            self.live.append(self.tracker.now)


def test_a_steps_memory_is_bounded_by_its_micro_batch_not_its_sample_count(samples, tiny_model, monkeypatch):
    monkeypatch.setattr(model_mod, "packs", lambda model: True)  # packed rows, as the trainer runs on a GPU
    model = load_policy(tiny_model)
    vision = VisionProcessor(tiny_model, model.config)
    blobs = BlobStore(samples.root)
    refs = [samples.sample(f"r/{i}", seed=i, prompt_len=12, response_len=24, image_size=(64, 48)) for i in range(8)]
    prepared = [prepare_sample(Sample.model_validate(blobs.get_json(r["ref"])), 0.5, blobs, vision) for r in refs]
    budget = 2 * prepared[0].n_tokens  # two samples a micro-batch, whatever the step's count
    peaks = {}
    for n in (4, 8):
        model.zero_grad(set_to_none=True)
        with LiveTensorBytes() as tracker:
            progress = EachMicroBatch(tracker)
            accumulate_gradients(model, prepared[:n], Hyper(micro_batch_tokens=budget), progress)
        assert len(progress.live) == n // 2
        assert len(set(progress.live)) == 1, f"memory left over from one micro-batch to the next: {progress.live}"
        peaks[n] = tracker.peak
    assert peaks[8] <= 1.02 * peaks[4], peaks


def test_each_distinct_image_of_a_step_is_processed_once(make_input, samples, monkeypatch):
    calls = []
    plain = VisionProcessor.process
    monkeypatch.setattr(VisionProcessor, "process", lambda self, images: calls.append(1) or plain(self, images))
    group = [samples.sample(f"r/0/0/{k}", group_id="g0", seed=k, image_size=(64, 48)) for k in range(4)]
    other = samples.sample("r/0/1/0", group_id="g1", seed=9, image_size=(40, 90))
    inp = TrainStepInput.model_validate(make_input([*group, other]))
    trainer = Trainer(device="cpu")
    loaded = trainer.load_samples(inp, trainer.ensure_state(inp))
    assert len(calls) == 2, "a group's diagram once, the other image once"
    assert loaded[0].vision is loaded[3].vision and loaded[4].vision is not loaded[0].vision


def test_a_steps_gpu_memory_metrics(monkeypatch):
    stats = {"num_alloc_retries": 3}
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: stats)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (30 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 41 * 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: 45 * 2**30)
    step = StepMemory(torch.device("cuda")).start()
    stats["num_alloc_retries"] = 5
    assert step.metrics(expandable=True) == {
        "perf/train_peak_allocated_gib": 41.0,
        "perf/train_peak_reserved_gib": 45.0,
        "perf/train_alloc_retries": 2.0,
        "perf/train_gpu_free_gib": 30.0,
        "perf/train_expandable_segments": 1.0,
    }
    assert StepMemory(torch.device("cpu")).start().metrics() == {}


def test_expandable_segments_only_while_a_step_trains(monkeypatch):
    settings = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch._C, "_accelerator_setAllocatorSettings", settings.append, raising=False)
    with training_allocator(torch.device("cuda")) as on:
        assert on and settings == ["expandable_segments:True"]
    assert settings == ["expandable_segments:True", "expandable_segments:False"], "off again for the ipc buckets"
    monkeypatch.setenv("TEMPO_RL_EXPANDABLE_SEGMENTS", "0")
    with training_allocator(torch.device("cuda")) as on:
        assert not on
    with training_allocator(torch.device("cpu")) as on:
        assert not on
    assert len(settings) == 2 and memory.expandable_segments_wanted() is False


def _policy_and_image_batch(samples, tiny_model, prefix: str, count: int):
    """The tiny VLM and `count` prepared samples, each with a diagram of its own size."""
    model = load_policy(tiny_model)
    vision, blobs = VisionProcessor(tiny_model, model.config), BlobStore(samples.root)
    refs = [samples.sample(f"{prefix}/{i}", seed=i, image_size=(64, 48 + 16 * i)) for i in range(count)]
    batch = [
        prepare_sample(Sample.model_validate(blobs.get_json(r["ref"])), 1.0 - i, blobs, vision)
        for i, r in enumerate(refs)
    ]
    return model, batch


def _gradients(model, batch) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    accumulate_gradients(model, batch, Hyper(), NoProgress())
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_vision_blocks_recomputed_in_the_backward_give_the_same_gradients(samples, tiny_model):
    from trainer.model.gpu_setup import checkpoint_vision_blocks

    model, batch = _policy_and_image_batch(samples, tiny_model, "v", 2)
    kept = _gradients(model, batch)
    assert checkpoint_vision_blocks(model) == len(model.model.visual.blocks) > 0
    recomputed = _gradients(model, batch)
    assert kept.keys() == recomputed.keys() and any(n.startswith("model.visual.blocks") for n in kept)
    assert all(torch.equal(kept[n], recomputed[n]) for n in kept), "recomputing the vision blocks changed a gradient"


def test_vision_images_in_one_packed_attention_give_the_models_gradients(samples, tiny_model, monkeypatch):
    """use_on_vision: every image of a micro-batch in one attention call (each image's patches attending
    to each other only), against the model's own image-by-image attention: the same logprobs and
    gradients to fp32 rounding. On the CPU the packed call is SDPA under the block-diagonal mask; on a
    GPU, varlen flash attention (tests/python/test_bf16_compute.py's GPU path)."""
    from trainer.model import varlen_attention
    from trainer.model.policy import forward_response

    model, batch = _policy_and_image_batch(samples, tiny_model, "w", 3)

    def grads() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        gradients = _gradients(model, batch)
        with torch.no_grad():
            return gradients, torch.cat(forward_response(model, batch, 1.0, False).logprobs)

    own, own_logps = grads()
    images_per_call: list[int] = []
    packed = varlen_attention.packed_attention

    def counting(q, k, v, cu, *rest, **kw):
        images_per_call.append(len(cu) - 1)
        return packed(q, k, v, cu, *rest, **kw)

    monkeypatch.setattr(varlen_attention, "packed_attention", counting)
    assert varlen_attention.use_on_vision(model) == len(model.model.visual.blocks) > 0
    one_call, one_call_logps = grads()
    assert images_per_call and max(images_per_call) >= 2, images_per_call
    assert torch.allclose(own_logps, one_call_logps, atol=1e-5), (own_logps - one_call_logps).abs().max()
    assert own.keys() == one_call.keys() and any(n.startswith("model.visual.blocks") for n in own)
    worst = max(((own[n] - one_call[n]).abs().max() / own[n].abs().max().clamp_min(1e-12)).item() for n in own)
    assert worst < 1e-4, f"packed vision attention moved a gradient by {worst:.2e} (relative)"
