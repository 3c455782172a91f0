"""The tiny Qwen3-VL-MoE model: seeded and byte-identical, its fused experts in the layout vLLM loads,
loadable by transformers as the model that wrote it, and never confused with the dense tiny model."""

import json
from pathlib import Path

import pytest
import torch

from trainer.model.moe_layout import to_checkpoint_layout
from trainer.generators.tiny_model import OutputRefused, build_tiny_model
from trainer.generators.tiny_moe_model import MOE_TEXT_CONFIG, build_tiny_moe_model, existing_seed


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-moe")
    return build_tiny_moe_model(root / "a", seed=0), build_tiny_moe_model(root / "b", seed=0)


def test_same_seed_gives_byte_identical_files(built):
    a, b = built
    for name in ["model.safetensors", "config.json", "tokenizer_config.json", "tempo_rl_tiny_moe.json"]:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert existing_seed(a) == 0


def test_config_and_expert_layout(built):
    from safetensors import safe_open

    d: Path = built[0]
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3VLMoeForConditionalGeneration"] and cfg["model_type"] == "qwen3_vl_moe"
    text = cfg["text_config"]
    assert (text["num_experts_per_tok"], text["num_hidden_layers"], text["norm_topk_prob"]) == (2, 2, True)
    assert text.get("num_experts", text.get("num_local_experts")) == 8
    hidden, inter = text["hidden_size"], text["moe_intermediate_size"]
    with safe_open(d / "model.safetensors", "pt") as f:
        # Qwen's released layout, which vLLM transposes on load
        assert f.get_slice("model.language_model.layers.0.mlp.experts.gate_up_proj").get_shape() == [
            8,
            hidden,
            2 * inter,
        ]
        assert f.get_slice("model.language_model.layers.0.mlp.experts.down_proj").get_shape() == [8, inter, hidden]
    assert to_checkpoint_layout(d) == [], "already in the released layout: nothing to do"


def test_loads_as_the_model_that_wrote_it_and_checkpoints_keep_the_layout(built, tmp_path):
    from safetensors import safe_open
    from transformers import AutoModelForImageTextToText, Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

    from trainer.checkpoint.atomic import write_model_dir
    from trainer.generators.tiny_model import VISION_CONFIG

    torch.manual_seed(0)
    fresh = (
        Qwen3VLMoeForConditionalGeneration(
            Qwen3VLMoeConfig(
                text_config=dict(MOE_TEXT_CONFIG), vision_config=dict(VISION_CONFIG), tie_word_embeddings=True
            )
        )
        .float()
        .eval()
    )
    loaded = AutoModelForImageTextToText.from_pretrained(built[0], dtype=torch.float32).eval()
    ids = torch.tensor([[151644, 872, 198, 3838, 374, 220, 17, 10, 18, 30, 151645]])
    with torch.no_grad():
        assert torch.equal(fresh(input_ids=ids).logits, loaded(input_ids=ids).logits)
    # a checkpoint the trainer writes for the engines is in the released layout too (save_pretrained is not)
    write_model_dir(tmp_path / "ckpt", loaded, built[0])
    with safe_open(tmp_path / "ckpt" / "model.safetensors", "pt") as f:
        assert f.get_slice("model.language_model.layers.1.mlp.experts.gate_up_proj").get_shape() == [8, 64, 256]
    again = AutoModelForImageTextToText.from_pretrained(tmp_path / "ckpt", dtype=torch.float32).eval()
    with torch.no_grad():
        assert torch.equal(again(input_ids=ids).logits, loaded(input_ids=ids).logits)


def test_neither_generator_takes_the_others_folder(built, tmp_path):
    with pytest.raises(OutputRefused, match="holds no tiny model"):
        build_tiny_model(built[0], seed=0, force=True)
    dense = build_tiny_model(tmp_path / "dense", seed=0)
    with pytest.raises(OutputRefused, match="holds no tiny MoE model"):
        build_tiny_moe_model(dense, seed=0, force=True)
    with pytest.raises(OutputRefused, match="seed 0, not seed 3"):
        build_tiny_moe_model(built[1], seed=3)
