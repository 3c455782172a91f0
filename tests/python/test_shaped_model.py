"""Shaped models: the shape table holds the public Qwen3-VL-2B numbers, and the generator (run on a tiny
shape of the same form; the 2B model itself is never generated here) writes a loadable, seeded model
and never touches what it must not."""

import json
from pathlib import Path

import pytest
import torch

from trainer.generators.shaped_model import (
    MANIFEST,
    SHAPES,
    _tensor_plan,
    _config,
    build_shaped_model,
    existing_identity,
)
from trainer.generators.shaped_model import main as shaped_main
from trainer.generators.tiny_model import OutputRefused
from trainer.generators.tiny_model import TEXT_CONFIG, VISION_CONFIG

# The tiny model's sizes in the shape table's form, with pixel limits of its own.
TEST_SPEC = {
    "text_config": dict(TEXT_CONFIG),
    "vision_config": dict(VISION_CONFIG),
    "tie_word_embeddings": True,
    "image_pixels": [32 * 32 * 4, 32 * 32 * 16],
    "video_pixels": [32 * 32 * 4, 32 * 32 * 64],
}


def _build(out: Path, seed: int = 0, dtype: str = "bfloat16", force: bool = False, **kw) -> Path:
    return build_shaped_model(
        out, shape="test", seed=seed, dtype=dtype, device="cpu", force=force, spec=TEST_SPEC, **kw
    )


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _weights(d: Path) -> dict[str, bytes]:
    return {k: v for k, v in _snapshot(d).items() if k.endswith(".safetensors")}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("shaped")
    return {
        "a": _build(root / "seed0-a"),
        "b": _build(root / "seed0-b"),
        "c": _build(root / "seed1", seed=1),
        "f32": _build(root / "seed0-f32", dtype="float32"),
        "sharded": _build(root / "sharded", max_shard_size="5MB"),
    }


def test_the_2b_shape_holds_the_public_numbers():
    spec = SHAPES["qwen3-vl-2b"]
    text, vision = spec["text_config"], spec["vision_config"]
    assert (text["hidden_size"], text["num_hidden_layers"], text["intermediate_size"]) == (2048, 28, 6144)
    assert (text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"]) == (16, 8, 128)
    assert text["vocab_size"] == 151936 and text["max_position_embeddings"] == 262144
    assert text["rope_parameters"]["rope_theta"] == 5000000 and text["rope_parameters"]["mrope_section"] == [24, 20, 20]
    assert sum(text["rope_parameters"]["mrope_section"]) == text["head_dim"] // 2
    assert spec["tie_word_embeddings"] is True
    assert (vision["depth"], vision["hidden_size"], vision["num_heads"], vision["intermediate_size"]) == (
        24,
        1024,
        16,
        4096,
    )
    assert vision["out_hidden_size"] == text["hidden_size"] and vision["deepstack_visual_indexes"] == [5, 11, 17]
    assert vision["num_position_embeddings"] == 2304 and (vision["patch_size"], vision["spatial_merge_size"]) == (16, 2)
    assert spec["image_pixels"] == [65536, 16777216] and spec["video_pixels"] == [4096, 25165824]


def test_the_2b_shape_has_the_published_parameter_count():
    # 2 127 532 032 parameters x 2 bytes = the published checkpoint's 4.26 GB; planned on meta, nothing allocated
    plan = _tensor_plan(_config(SHAPES["qwen3-vl-2b"], "bfloat16"))
    assert sum(torch.Size(t.shape).numel() for t in plan) == 2_127_532_032
    assert "lm_head.weight" not in {t.name for t in plan}, "tied: saved once, as the embedding"


def test_layout_manifest_and_processor_limits(built):
    d: Path = built["a"]
    for name in [
        ".complete",
        MANIFEST,
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "preprocessor_config.json",
        "video_preprocessor_config.json",
    ]:
        assert (d / name).exists(), name
    assert existing_identity(d) == ("test", 0, "bfloat16")
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3VLForConditionalGeneration"] and cfg["dtype"] == "bfloat16"
    image = json.loads((d / "preprocessor_config.json").read_text())
    assert image["size"] == {"shortest_edge": 4096, "longest_edge": 16384} and image["patch_size"] == 16
    assert (
        json.loads((d / "tokenizer_config.json").read_text())["model_max_length"]
        == TEXT_CONFIG["max_position_embeddings"]
    )


def test_the_2b_processor_files_carry_the_public_limits():
    from trainer.generators.shaped_model import _processor_files

    files = _processor_files(SHAPES["qwen3-vl-2b"])
    image, video = files["preprocessor_config.json"], files["video_preprocessor_config.json"]
    assert image["size"] == {"shortest_edge": 65536, "longest_edge": 16777216}
    assert video["size"] == {"shortest_edge": 4096, "longest_edge": 25165824}
    assert (image["patch_size"], image["merge_size"], image["temporal_patch_size"]) == (16, 2, 2)
    assert image["image_mean"] == [0.5] * 3 and image["image_std"] == [0.5] * 3
    assert "max_frames" not in video


def test_loads_with_transformers_in_the_written_dtype(built):
    from transformers import Qwen3VLForConditionalGeneration

    for key, dtype in (("a", torch.bfloat16), ("f32", torch.float32), ("sharded", torch.bfloat16)):
        model, info = Qwen3VLForConditionalGeneration.from_pretrained(built[key], output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], key
        assert model.dtype == dtype, key
        assert model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    # transformers' default initialisation: normal(0, 0.02) weights, norms at one, zero biases
    state = model.state_dict()
    assert abs(float(state["model.language_model.embed_tokens.weight"].float().std()) - 0.02) < 1e-3
    assert bool((state["model.language_model.norm.weight"] == 1).all())
    assert bool((state["model.visual.blocks.0.attn.qkv.bias"] == 0).all())


def test_same_names_and_shapes_as_save_pretrained(built, tmp_path):
    from safetensors import safe_open
    from transformers import Qwen3VLForConditionalGeneration

    def shapes(d: Path) -> dict[str, list[int]]:
        out = {}
        for f in d.glob("*.safetensors"):
            with safe_open(f, "pt") as h:
                out.update({k: h.get_slice(k).get_shape() for k in h.keys()})
        return out

    ref = Qwen3VLForConditionalGeneration.from_pretrained(built["a"])
    ref.save_pretrained(tmp_path / "ref")
    assert shapes(built["a"]) == shapes(tmp_path / "ref")
    index = json.loads((built["sharded"] / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(shapes(built["a"])) and len(set(index["weight_map"].values())) > 1


def test_seeds_reproduce_and_dtypes_agree(built):
    from safetensors.torch import load_file

    assert _weights(built["a"]) == _weights(built["b"])
    assert _weights(built["a"]) != _weights(built["c"])
    # the bfloat16 model is its float32 twin rounded, and the sharded one the same tensors regrouped
    bf16 = load_file(built["a"] / "model.safetensors")
    f32 = load_file(built["f32"] / "model.safetensors")
    sharded = {}
    for f in built["sharded"].glob("*.safetensors"):
        sharded.update(load_file(f))
    for name, value in bf16.items():
        assert torch.equal(f32[name].to(torch.bfloat16), value), name
        assert torch.equal(sharded[name], value), name


def test_existing_model_of_the_same_identity_is_kept(built):
    before = (built["a"] / "model.safetensors").stat().st_mtime_ns
    _build(built["a"])
    assert (built["a"] / "model.safetensors").stat().st_mtime_ns == before


def test_another_seed_or_dtype_is_replaced_only_with_force(built):
    before = _snapshot(built["c"])
    with pytest.raises(OutputRefused, match=r"test seed 1 bfloat16, not test seed 5 bfloat16.*--force"):
        _build(built["c"], seed=5)
    with pytest.raises(OutputRefused, match=r"not test seed 1 float32"):
        _build(built["c"], seed=1, dtype="float32")
    assert _snapshot(built["c"]) == before
    replaced = _build(built["c"], seed=2, force=True)
    assert existing_identity(replaced) == ("test", 2, "bfloat16")
    assert _weights(replaced) != {k: v for k, v in before.items() if k.endswith(".safetensors")}
    assert not list(replaced.parent.glob(f".{replaced.name}.*")), "no temp folder left behind"


def test_a_folder_of_other_files_is_never_touched(tmp_path):
    user = tmp_path / "mine"
    (user / "sub").mkdir(parents=True)
    (user / "thesis.tex").write_text("my only copy")
    (user / "sub" / "data.bin").write_bytes(b"\x00\x01")
    # nor a tiny model's folder (its manifest is not this generator's); a stand-in, not the cached one
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "tempo_rl_tiny.json").write_text('{"seed": 0, "generator": "trainer.generators.tiny_model"}')
    (tiny / ".complete").write_text("ok\n")
    for folder in (user, tiny):
        before = _snapshot(folder)
        for force in (False, True):
            with pytest.raises(OutputRefused, match="not empty"):
                _build(folder, force=force)
            assert _snapshot(folder) == before
    with pytest.raises(SystemExit) as exit_info:
        shaped_main(["--shape", "qwen3-vl-2b", "--out", str(user), "--device", "cpu"])
    assert exit_info.value.code == 2


def test_unknown_shape_and_dtype_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown shape"):
        build_shaped_model(tmp_path / "x", shape="qwen3-vl-999b", device="cpu")
    with pytest.raises(ValueError, match="dtype"):
        build_shaped_model(tmp_path / "x", dtype="float16", device="cpu")
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="drawing the weights on CUDA needs a CUDA device")
def test_cuda_draws_load_and_reproduce(tmp_path):
    from transformers import Qwen3VLForConditionalGeneration

    a = build_shaped_model(tmp_path / "a", shape="test", seed=0, device="cuda", spec=TEST_SPEC)
    b = build_shaped_model(tmp_path / "b", shape="test", seed=0, device="cuda", spec=TEST_SPEC)
    assert _weights(a) == _weights(b)
    assert json.loads((a / MANIFEST).read_text())["device"] == "cuda"
    assert Qwen3VLForConditionalGeneration.from_pretrained(a).dtype == torch.bfloat16
