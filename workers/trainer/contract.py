"""Pydantic models of the trainer's payloads (docs/CONTRACTS.md), snake_case like the TS zod schemas.

Objects are strict (an unknown key is an error), as in config/schema.ts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# The hyper-parameters' defaults, generated from their one declaration (config/grpo.ts) by
# config/hyper-defaults.ts. The workflow sends every field; the defaults serve the trainer's own
# tests and benches, which give a few.
HYPER_DEFAULTS = json.loads((Path(__file__).parent / "hyper_defaults.json").read_text())
_KL, _TIS = HYPER_DEFAULTS["kl"], HYPER_DEFAULTS["tis"]
# The size bounds of config/bounds.ts: tokens of one sequence or micro-batch (MAX_TOKENS), and the prompts,
# samples or records of one step (MAX_BATCH). tests/python/test_contract_schema.py holds them equal.
MAX_TOKENS = 2**24
MAX_BATCH = 65_536


class KlConfig(Strict):
    enabled: bool = _KL["enabled"]
    coef: float = Field(default=_KL["coef"], ge=0)
    type: Literal["k1", "k2", "low_var_kl"] = _KL["type"]


class TisConfig(Strict):
    enabled: bool = _TIS["enabled"]
    # At least 1 (below, truncate caps every weight under 1 and mask's band is empty), above 1 with
    # mask (at 1 its band keeps only ratios of exactly 1): the bounds of grpo.tis in config/schema.ts.
    clip: float = Field(default=_TIS["clip"], ge=1)
    # truncate: min(w, clip); mask: w inside [1/clip, clip], else the token does not train.
    mode: Literal["truncate", "mask"] = _TIS["mode"]

    @model_validator(mode="after")
    def _band(self) -> TisConfig:
        if self.mode == "mask" and self.clip <= 1:
            raise ValueError(
                f"tis.clip must be above 1 with mode mask, given {self.clip}: the band [1/clip, clip] "
                "keeps only tokens whose ratio is exactly 1 (almost none train)"
            )
        return self


class Hyper(Strict):
    """lib/contract.ts TrainHyper: the grpo keys the trainer uses, the rollout temperature, model.dtype
    and rollout.routing_replay. Bounds as in config/grpo.ts; defaults from HYPER_DEFAULTS."""

    lr: float = Field(default=HYPER_DEFAULTS["lr"], gt=0)
    weight_decay: float = Field(default=HYPER_DEFAULTS["weight_decay"], ge=0)
    adam_eps: float = Field(default=HYPER_DEFAULTS["adam_eps"], gt=0, le=1)
    # model.dtype: forward and backward in this precision (autocast); weights and AdamW state stay fp32.
    compute_dtype: Literal["float32", "bfloat16"] = HYPER_DEFAULTS["compute_dtype"]
    eps_clip: float = Field(default=HYPER_DEFAULTS["eps_clip"], gt=0)
    eps_clip_high: float = Field(default=HYPER_DEFAULTS["eps_clip_high"], gt=0)
    dr_grpo: bool = HYPER_DEFAULTS["dr_grpo"]
    kl: KlConfig = KlConfig()
    entropy_coef: float = Field(default=HYPER_DEFAULTS["entropy_coef"], ge=0)
    tis: TisConfig = TisConfig()
    loss_agg: Literal["sample_mean", "token_mean"] = HYPER_DEFAULTS["loss_agg"]
    micro_batch_tokens: int = Field(default=HYPER_DEFAULTS["micro_batch_tokens"], gt=0, le=MAX_TOKENS)
    grad_clip: float = Field(default=HYPER_DEFAULTS["grad_clip"], gt=0)
    # Optimizer updates per step: the samples in this many consecutive mini-batches, this many passes.
    ppo_mini_batches: int = Field(default=HYPER_DEFAULTS["ppo_mini_batches"], ge=1, le=MAX_BATCH)
    ppo_epochs: int = Field(default=HYPER_DEFAULTS["ppo_epochs"], ge=1)
    temperature: float = Field(default=HYPER_DEFAULTS["temperature"], gt=0)
    # rollout.routing_replay (R3): an MoE policy's forward routes each token to the experts the engine
    # routed it to (Sample.routed_experts), weights recomputed from the trainer's router (model/routing_replay.py).
    routing_replay: bool = HYPER_DEFAULTS["routing_replay"]

    @model_validator(mode="after")
    def _clip_order(self) -> Hyper:
        if self.eps_clip_high < self.eps_clip:
            raise ValueError(f"eps_clip_high ({self.eps_clip_high}) must be at least eps_clip ({self.eps_clip})")
        return self


class SampleRef(Strict):
    ref: str
    reward: float
    group_id: str


class DataCursor(Strict):
    epoch: int = Field(default=0, ge=0)
    cursor: int = Field(default=0, ge=0)


class TrainStepInput(Strict):
    """lib/contract.ts TrainStepInput. The workflow sends every field but sleep_engines and
    engine_sleep_level (colocated engines only); the defaults serve the trainer's own tests and benches."""

    run_id: str = Field(min_length=1)
    step: int = Field(ge=0)
    run_dir: str
    # The store of the samples and images (a store URI: s3://…, file:///…, a path). With an s3:// store the
    # checkpoints are committed there too and run_dir is replaced by the trainer host's scratch copy
    # (stores/checkpoints.py).
    blob_store: str
    model_path: str
    # Empty when every episode of the step failed or was filtered: the step commits without an update.
    samples: list[SampleRef]
    hyper: Hyper = Hyper()
    data_cursor: DataCursor = DataCursor()
    # "sft": masked NLL on the samples' loss-mask tokens (rewards and advantages unused).
    algorithm: Literal["grpo", "sft"] = "grpo"
    # run.keep_checkpoints: after a commit, only the newest k full checkpoints keep their weights (0: all),
    # and run.keep_checkpoint_every: also those of steps N with (N + 1) a multiple of it (0: none).
    keep_checkpoints: int = Field(default=0, ge=0)
    keep_checkpoint_every: int = Field(default=0, ge=0)
    # run.checkpoint_interval: weights and optimizer state are saved when (N + 1) is a multiple of it
    # (or full_checkpoint: the run's last step); every other step commits its record only (step/replay.py).
    checkpoint_interval: int = Field(default=1, ge=1)
    full_checkpoint: bool = False
    # engines.colocate: the engines that share the trainer's GPUs, put to sleep (engines.sleep_level)
    # before it trains; the sync after the step wakes them.
    sleep_engines: list[str] = []
    engine_sleep_level: Literal[1, 2] = 2
    # run.deterministic: deterministic algorithms from a generator seeded by (seed, step) (step/determinism.py).
    deterministic: bool = False
    seed: int = 0


class TrainStepOutput(Strict):
    step: int
    weight_version: int
    checkpoint: str
    already_committed: bool
    metrics: dict[str, float]


class Turn(BaseModel):
    model_config = ConfigDict(extra="allow")
    engine: str = ""
    # None: the engine reported no weight version (recorded as unknown, never assumed).
    weight_version: int | None = 0
    generated_tokens: int = 0
    observation_tokens: int = 0
    finish_reason: str = ""


class Sample(Strict):
    """The sample document the episode workflow writes (blob:named/samples/<episode id>.json)."""

    schema_version: Literal[1] = 1
    episode_id: str
    run_id: str
    step: int
    prompt_index: int
    sample_index: int
    group_id: str
    prompt_ids: list[int] = Field(min_length=1)
    response_ids: list[int]
    loss_mask: list[Literal[0, 1]]
    rollout_logprobs: list[float]
    images: list[str] = []
    reward: float
    status: str
    truncated_reason: str | None = None
    temperature: float = 1.0
    label: str | None = None
    # The environment the episode ran in (rollout.environment); None: samples stored before it was recorded.
    environment: str | None = None
    turns: list[Turn] = []
    routed_experts: object | None = None

    @model_validator(mode="after")
    def _aligned(self) -> Sample:
        n = len(self.response_ids)
        if len(self.loss_mask) != n or len(self.rollout_logprobs) != n:
            raise ValueError(
                f"sample {self.episode_id}: response_ids ({n}), loss_mask ({len(self.loss_mask)}) and "
                f"rollout_logprobs ({len(self.rollout_logprobs)}) must have the same length"
            )
        return self


class SyncWeightsInput(Strict):
    run_id: str
    weight_version: int = Field(ge=0)
    checkpoint: str
    engines: list[str]
    # "disk": engines reload the checkpoint's directory (or pull it from an s3:// store).
    # "ipc": the trainer's in-memory weights through shared memory on its host (weights/ipc.py).
    transport: Literal["disk", "ipc"] = "disk"
    # How /pause treats in-flight requests: wait for them, abort them, or keep them queued (the workflow
    # always says: rollout.sync_in_flight in the async window, wait in a synchronous run).
    pause_mode: Literal["wait", "abort", "keep"]
    # engines.colocate: the engines slept while the trainer trained; the sync wakes them.
    wake_engines: bool = False
    # ipc: the engines' dtype (model.dtype), the size of each bucket (engines.ipc_bucket_mb) and how the
    # engines load it (engines.ipc_load: in place where the weights allow it, or vLLM's layer-wise reload).
    engine_dtype: Literal["float32", "bfloat16"] = "float32"
    ipc_bucket_mb: int = Field(default=1024, ge=1)
    ipc_load: Literal["auto", "layerwise"] = "auto"


class EngineSyncResult(Strict):
    url: str
    ok: bool
    seconds: float
    weight_version: str | None = None
    error: str | None = None


class SyncWeightsOutput(Strict):
    weight_version: int
    engines: list[EngineSyncResult]
    # Seconds of the phases (wake_seconds, load_seconds, transfer_seconds, seconds in all) and, for
    # ipc, transfer_bytes and buckets.
    timings: dict[str, float] = {}
