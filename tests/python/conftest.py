"""Fixtures: the tiny Qwen3-VL model, a blob store with samples, and a run directory."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

IMAGE_PAD = 151655
VISION_START = 151652
VISION_END = 151653
IM_END = 151645


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from trainer.generators.tiny_model import build_tiny_model

    cached = os.environ.get("TEMPO_RL_TINY_MODEL")
    if cached and (Path(cached) / ".complete").exists():
        return Path(cached)
    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", seed=0)


class SampleFactory:
    """Writes sample documents (and PNG images) into a blob store laid out like stores/blobstore.ts."""

    def __init__(self, root: Path, model_path: Path):
        self.root = root
        self.model_path = model_path
        self._image_processor = None

    def put_png(self, color=(200, 30, 30), size=(64, 48)) -> str:
        from PIL import Image

        buf = io.BytesIO()
        Image.new("RGB", size, color).save(buf, format="PNG")
        data = buf.getvalue()
        digest = hashlib.sha256(data).hexdigest()
        ref = f"blob:cas/{digest[:2]}/{digest}.png"
        path = self.root / ref[len("blob:") :]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return ref

    def placeholders_for(self, size) -> int:
        from PIL import Image
        from transformers import AutoImageProcessor

        if self._image_processor is None:
            self._image_processor = AutoImageProcessor.from_pretrained(self.model_path)
        grid = self._image_processor(images=[Image.new("RGB", size)], return_tensors="pt")["image_grid_thw"]
        return int(grid.prod() // 4)

    def sample(
        self,
        key: str,
        *,
        prompt_len=6,
        response_len=5,
        reward=1.0,
        group_id="g0",
        image_size=None,
        placeholder_delta=0,
        seed=0,
        mask=None,
        pictures=(),
        environment=None,
    ) -> dict:
        """`image_size`: one red image; `pictures`: several, as (size, colour) pairs (the same pair is
        the same blob); each image's placeholders go after the prompt's first two tokens."""
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(100, 5000, (prompt_len,), generator=g).tolist()
        pictures = [(image_size, (200, 30, 30))] if image_size is not None else list(pictures)
        images = []
        for j, (size, color) in enumerate(reversed(pictures)):
            images.insert(0, self.put_png(color=color, size=size))
            n = self.placeholders_for(size) + (placeholder_delta if j == len(pictures) - 1 else 0)
            prompt = prompt[:2] + [VISION_START] + [IMAGE_PAD] * n + [VISION_END] + prompt[2:]
        response = torch.randint(100, 5000, (response_len,), generator=g).tolist()
        mask = mask if mask is not None else [1] * response_len
        logprobs = [(-0.5 - 0.1 * i) if m else 0.0 for i, m in enumerate(mask)]
        doc = {
            "schema_version": 1,
            "episode_id": key,
            "run_id": "r",
            "step": 0,
            "prompt_index": 0,
            "sample_index": 0,
            "group_id": group_id,
            "prompt_ids": prompt,
            "response_ids": response,
            "loss_mask": mask,
            "rollout_logprobs": logprobs,
            "images": images,
            "reward": reward,
            "status": "COMPLETED",
            "truncated_reason": None,
            "temperature": 1.0,
            "label": "1",
            "turns": [],
            "routed_experts": None,
        }
        if environment is not None:
            doc["environment"] = environment
        ref = f"blob:named/samples/{key}.json"
        path = self.root / ref[len("blob:") :]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
        return {"ref": ref, "reward": reward, "group_id": group_id}


@pytest.fixture
def blob_dir(tmp_path) -> Path:
    root = tmp_path / "blobs"
    root.mkdir()
    return root


@pytest.fixture
def samples(blob_dir, tiny_model) -> SampleFactory:
    return SampleFactory(blob_dir, tiny_model)


@pytest.fixture
def mixed_refs(samples) -> list[dict]:
    """Two groups of two: text-only and image samples mixed, varied lengths, one masked observation."""
    return [
        samples.sample("r/0/0/0", reward=1.0, group_id="r/0/0", seed=1),
        samples.sample(
            "r/0/0/1",
            reward=0.0,
            group_id="r/0/0",
            seed=2,
            response_len=7,
            mask=[1, 1, 0, 0, 1, 1, 1],
            image_size=(64, 48),
        ),
        samples.sample("r/0/1/0", reward=1.0, group_id="r/0/1", seed=3, image_size=(40, 90), prompt_len=9),
        samples.sample("r/0/1/1", reward=0.0, group_id="r/0/1", seed=4, response_len=3),
    ]


@pytest.fixture
def make_input(tmp_path, blob_dir, tiny_model):
    """A train_step input (dict) for the tiny model; hyper defaults to a large lr so weights move."""

    def make(sample_refs: list[dict], step=0, run_dir: Path | None = None, **hyper) -> dict:
        return {
            "run_id": "r",
            "step": step,
            "run_dir": str(run_dir or tmp_path / "run"),
            "blob_store": str(blob_dir),
            "model_path": str(tiny_model),
            "samples": sample_refs,
            "hyper": {"lr": 1e-3, **hyper},
            "data_cursor": {"epoch": 0, "cursor": step + 1},
        }

    return make
