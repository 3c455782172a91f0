"""The model FLOPs of a VLM train step as the trainer runs it (bench/trainer.py's MFU), forward and
backward (×3 of the forward's matmuls):

- text: 6 · (decoder parameters, embedding and LM head aside) · tokens of the packed rows;
- attention: causal, each sample alone (varlen): 6 · layers · heads·head_dim · T² per sample;
- LM head: 6 · vocabulary · hidden · the rows that reach it (loss-mask tokens only);
- vision: per micro-batch, each distinct image once (the trainer encodes it once per row): 6 · block
  parameters · patches + 6 · merger parameters · merged tokens (patches / merge²) + full attention
  within each image, 12 · blocks · hidden · patches².

`params` is every parameter (the 6·N·tokens convention counts them all against every token: `mfu_6n`)."""

from __future__ import annotations

from trainer.model.image_features import distinct_images


def _param_groups(model) -> dict[str, int]:
    groups = {"text": 0, "vision_patch": 0, "vision_merge": 0, "other": 0}
    for name, p in model.named_parameters():
        if "visual.blocks" in name or "visual.patch_embed" in name:
            groups["vision_patch"] += p.numel()
        elif "visual.merger" in name or "visual.deepstack_merger" in name:
            groups["vision_merge"] += p.numel()
        elif "layers." in name or name.endswith("language_model.norm.weight"):
            groups["text"] += p.numel()
        else:
            groups["other"] += p.numel()  # embeddings (the tied LM head counts apart), vision positions
    return groups


def vlm_flops(model, samples: list, bins: list[list]) -> dict:
    cfg = model.config
    text_cfg = getattr(cfg, "text_config", cfg)
    groups = _param_groups(model)
    width = text_cfg.num_attention_heads * getattr(
        text_cfg, "head_dim", text_cfg.hidden_size // text_cfg.num_attention_heads
    )
    tokens = sum(s.n_tokens for s in samples)
    lm_rows = int(sum(float(s.loss_mask.sum()) for s in samples))
    attention = sum(6 * text_cfg.num_hidden_layers * width * s.n_tokens**2 for s in samples)
    vision, patches = 0, 0
    vision_cfg = getattr(cfg, "vision_config", None)
    if vision_cfg is not None:
        merge = vision_cfg.spatial_merge_size**2
        for batch in bins:
            for n in (image.patches for image in distinct_images(batch).values()):
                patches += n
                vision += 6 * groups["vision_patch"] * n + 6 * groups["vision_merge"] * n // merge
                vision += 12 * vision_cfg.depth * vision_cfg.hidden_size * n * n
    out = {
        "tokens": tokens,
        "lm_rows": lm_rows,
        "patches": patches,
        "text": 6 * groups["text"] * tokens,
        "attention": attention,
        "lm_head": 6 * text_cfg.vocab_size * text_cfg.hidden_size * lm_rows,
        "vision": vision,
        "params": sum(groups.values()),
    }
    out["total"] = out["text"] + out["attention"] + out["lm_head"] + out["vision"]
    return out
