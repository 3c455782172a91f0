"""The tiny Qwen3-VL model: seeded, byte-identical for a seed, loadable, and its template renders images and tools."""

import json
from pathlib import Path

import pytest

from trainer.generators.tiny_model import MAX_PIXELS, OutputRefused, build_tiny_model, existing_seed
from trainer.generators.tiny_model import main as tiny_main


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {
        "a": build_tiny_model(root / "seed0-a", seed=0),
        "b": build_tiny_model(root / "seed0-b", seed=0),
        "c": build_tiny_model(root / "seed1", seed=1),
    }


def test_same_seed_gives_byte_identical_weights(built):
    a = (built["a"] / "model.safetensors").read_bytes()
    assert a == (built["b"] / "model.safetensors").read_bytes()
    assert a != (built["c"] / "model.safetensors").read_bytes()


def test_layout_and_config(built):
    d: Path = built["a"]
    for name in [
        ".complete",
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
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3VLForConditionalGeneration"]
    assert cfg["tie_word_embeddings"] is True and cfg["dtype"] == "float32"
    assert cfg["text_config"]["hidden_size"] == 64
    assert json.loads((d / "preprocessor_config.json").read_text())["size"]["longest_edge"] == MAX_PIXELS


def test_existing_complete_model_of_the_same_seed_is_kept(built):
    before = (built["a"] / "model.safetensors").stat().st_mtime_ns
    build_tiny_model(built["a"], seed=0)
    assert (built["a"] / "model.safetensors").stat().st_mtime_ns == before


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_model_of_another_seed_is_replaced_only_with_force(built, tmp_path):
    # before: the old model was kept and the caller told the new seed
    before = _snapshot(built["c"])
    with pytest.raises(OutputRefused, match=r"seed 1, not seed 5.*--force"):
        build_tiny_model(built["c"], seed=5)
    assert _snapshot(built["c"]) == before
    replaced = build_tiny_model(built["c"], seed=2, force=True)
    assert existing_seed(replaced) == 2
    assert (replaced / "model.safetensors").read_bytes() != before["model.safetensors"]
    assert not list(replaced.parent.glob(f".{replaced.name}.*")), "no temp folder left behind"


def test_a_folder_of_user_files_is_never_touched(tmp_path):
    # before: --out DIR deleted everything DIR held and exited 0
    user = tmp_path / "mine"
    (user / "sub").mkdir(parents=True)
    (user / "thesis.tex").write_text("my only copy")
    (user / "sub" / "data.bin").write_bytes(b"\x00\x01")
    before = _snapshot(user)
    for force in (False, True):
        with pytest.raises(OutputRefused, match="not empty"):
            build_tiny_model(user, seed=0, force=force)
        assert _snapshot(user) == before
    with pytest.raises(SystemExit) as exit_info:
        tiny_main(["--out", str(user)])
    assert exit_info.value.code == 2
    assert _snapshot(user) == before


def test_loads_with_transformers_and_renders_images_and_tools(built):
    import torch
    from PIL import Image
    from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

    d = built["a"]
    model = Qwen3VLForConditionalGeneration.from_pretrained(d, dtype=torch.float32)
    assert model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    proc = AutoProcessor.from_pretrained(d)
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Find x."}]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "calc_score", "arguments": {"answer": "3"}}}],
        },
    ]
    tools = [{"type": "function", "function": {"name": "calc_score", "parameters": {"type": "object"}}}]
    text = proc.apply_chat_template(messages, tools=tools, tokenize=False)
    assert "<|vision_start|><|image_pad|><|vision_end|>Find x." in text
    assert '<tool_call>\n{"name": "calc_score", "arguments": {"answer": "3"}}\n</tool_call><|im_end|>' in text
    assert '<tools>\n{"type": "function", "function": {"name": "calc_score"' in text
    inputs = proc(text=[text], images=[Image.new("RGB", (128, 64))], return_tensors="pt")
    assert int((inputs["input_ids"] == 151655).sum()) == 8  # 128×64 → 4×2 merged patches
    with torch.no_grad():
        out = model(**inputs)
    assert out.logits.shape[-1] == 151936
