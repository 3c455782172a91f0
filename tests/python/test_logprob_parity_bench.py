"""bench/logprob-parity.py's parts that need no engine: the statistics, a completion from a generate
answer, the train sample built from it, the image normalisation and the fp32 LM head."""

import importlib.util
import io
import sys
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def bench():
    path = Path(__file__).resolve().parents[2] / "bench" / "logprob-parity.py"
    spec = importlib.util.spec_from_file_location("bench_logprob_parity", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_summary_splits_the_first_tokens_of_each_response(bench):
    engine = [torch.zeros(10), torch.zeros(3)]
    # response 0: |diff| 1.0 on its first 8 tokens, 3.0 after; response 1 (shorter than 8): 2.0
    trainer = [torch.tensor([1.0] * 8 + [-3.0] * 2), torch.tensor([2.0] * 3)]
    s = bench.summarize(trainer, engine)
    assert s["tokens"] == 13 and s["tokens_first_8"] == 11 and s["tokens_after_8"] == 2
    assert s["mean_abs_diff"] == pytest.approx((8 + 6 + 6) / 13)
    assert s["mean_abs_diff_first_8"] == pytest.approx(14 / 11) and s["mean_abs_diff_after_8"] == 3.0
    assert s["median_abs_diff"] == 1.0 and s["max_abs_diff"] == 3.0 and 2.0 < s["p99_abs_diff"] <= 3.0
    assert bench.summarize([], [])["mean_abs_diff"] is None


def test_a_generate_answer_becomes_the_train_sample_of_a_step(bench):
    prompt = bench.Prompt([151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198])
    choice = {
        "token_ids": [40, 1079, 151645],
        "logprobs": {
            "content": [
                {"token_id": 40, "logprob": -0.5},
                {"token_id": 1079, "logprob": -1.25},
                {"token_id": 151645, "logprob": -0.01},
            ]
        },
    }
    c = bench.completion_from_choice(prompt, choice)
    assert c.ids == [40, 1079, 151645] and c.logprobs == [-0.5, -1.25, -0.01]
    s = bench.train_sample(c, 3, bench.MemoryBlobs(), None, 1.0)
    assert s.input_ids == prompt.ids + c.ids and s.prompt_len == len(prompt.ids) and s.vision is None
    assert s.loss_mask.tolist() == [1.0, 1.0, 1.0] and s.rollout_logprobs.tolist() == [
        -0.5,
        -1.25,
        pytest.approx(-0.01),
    ]

    choice["logprobs"]["content"][1]["token_id"] = 7
    with pytest.raises(ValueError, match="sampled token is 1079"):
        bench.completion_from_choice(prompt, choice)


def test_an_image_sample_goes_through_the_trainers_processor(bench, tiny_model):
    from trainer.model.policy import VisionProcessor
    from transformers import AutoConfig

    vision = VisionProcessor(tiny_model, AutoConfig.from_pretrained(tiny_model))
    png = bench.normalized_png(_png((128, 64), "RGBA", (0, 0, 0, 0)))
    prompt = bench.Prompt([151644, 872, 198, 151652] + [151655] * 8 + [151653, 151645, 198], None, png)
    s = bench.train_sample(bench.Completion(prompt, [40], [-0.3]), 0, bench.MemoryBlobs(), vision, 1.0)
    assert s.vision is not None and vision.placeholders_needed(s.vision.image_grid_thw) == 8


def test_normalised_png_flattens_transparency_onto_white(bench):
    from PIL import Image

    img = Image.open(io.BytesIO(bench.normalized_png(_png((4, 4), "RGBA", (10, 20, 30, 0)))))
    assert img.mode == "RGB" and img.getpixel((0, 0)) == (255, 255, 255)


def test_lm_head_in_fp32_leaves_autocast_for_the_lm_head_only(bench):
    import trainer.model.policy as trainer_model

    plain = trainer_model.linear_logprobs
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(5, 16, generator=g), torch.randn(40, 16, generator=g)
    targets = torch.randint(0, 40, (5,), generator=g)
    fp32, _ = trainer_model.linear_logprobs(hidden, weight, targets, 0.7)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16, _ = trainer_model.linear_logprobs(hidden, weight, targets, 0.7)
        with bench.lm_head_in_fp32():
            wrapped, _ = trainer_model.linear_logprobs(hidden.bfloat16(), weight, targets, 0.7)
    assert not torch.equal(bf16, fp32)
    assert torch.allclose(wrapped, trainer_model.linear_logprobs(hidden.bfloat16().float(), weight, targets, 0.7)[0])
    assert trainer_model.linear_logprobs is plain  # restored


def _png(size, mode, color) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new(mode, size, color).save(buf, format="PNG")
    return buf.getvalue()


def test_scoring_holds_one_micro_batch_at_a_time(bench, samples, tiny_model):
    from trainer.contract import Sample
    from trainer.model.policy import VisionProcessor, load_policy, prepare_sample
    from trainer.step.memory import LiveTensorBytes
    from tempo_common.blobs import BlobStore

    model = load_policy(tiny_model)
    vision, blobs = VisionProcessor(tiny_model, model.config), BlobStore(samples.root)
    refs = [samples.sample(f"p/{i}", seed=i, prompt_len=12, response_len=24, image_size=(64, 48)) for i in range(6)]
    prepared = [prepare_sample(Sample.model_validate(blobs.get_json(r["ref"])), 0.0, blobs, vision) for r in refs]
    budget = 2 * prepared[0].n_tokens  # two samples a micro-batch
    with LiveTensorBytes() as tracker:
        starts = []
        hook = model.model.register_forward_pre_hook(lambda *_: starts.append(tracker.now))
        out = bench.trainer_logprobs(model, prepared, 1.0, "float32", False, budget)
        hook.remove()
    assert [len(lp) for lp in out] == [24] * 6 and all(lp.grad_fn is None for lp in out)
    # each micro-batch starts with only the logprobs of those before it held (on the host): before, the
    # last one's whole graph was still there while the next one ran
    assert len(starts) == 3 and starts[2] - starts[0] < 4096, starts
