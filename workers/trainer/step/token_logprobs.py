"""Each trained sample's per-token logprobs as the trainer computed them, written beside the sample.

The step's mean |trainer − engine| (train/train_rollout_logprob_abs_diff) says that the two disagree,
not where: `tempo-rl ui` puts these beside the engine's logprobs and colours each token by the
difference, as prime-rl colours tokens by mismatch (https://github.com/PrimeIntellect-ai/prime-rl/pull/2551).

What is recorded is the logprob the step's loss compares with the engine's: under the weights that
sampled the step (its first update's forward, or the old logprobs of a step of several updates), at
every response position, rounded to 1e-4 (a non-finite one is null: JSON has no NaN). One small JSON
blob a sample, named after the sample's own key (`samples/<episode id>.json` →
`samples/<episode id>.trainer-logprobs.json`: ui/trainer-logprobs.ts reads it by that name).

Bounded: a record holds one number (about 8 characters) per response token, so it is smaller than
the sample it sits beside (which holds the token ids, the engine's logprobs and the loss mask of the
same positions); a sample longer than MAX_TOKENS response tokens gets none. Collected on the device
during the micro-batches (no host sync there), copied to the host once, turned into lists a sample at
a time by the writers.

Exactly once: the step writes them after its commit, and only the attempt whose commit won
(train_step.py), so the records are the committed step's; an attempt that lost, or a retry that finds
the step committed, writes nothing. A key is a function of the episode alone: a write replaces,
never adds. A write that fails is logged, never the step's failure (the UI then shows none for it)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing

import torch

from tempo_common.blobs import BlobStoreBase, open_blob_store

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
WRITERS = 8  # an S3 store answers each put in tens of ms: a few at a time
MAX_TOKENS = 65_536  # response tokens a record holds at most (about 0.6 MB of JSON)


def trainer_logprobs_key(episode_id: str) -> str:
    return f"samples/{episode_id}.trainer-logprobs.json"


class TokenLogprobs:
    """The per-token logprobs of a step's samples, by sample name (its episode id)."""

    def __init__(self) -> None:
        self.by_name: dict[str, torch.Tensor] = {}
        self.too_long = 0

    def add(self, samples, logprobs: torch.Tensor) -> None:
        """`logprobs`: the samples' response positions, concatenated in their order."""
        for s, lp in zip(samples, logprobs.detach().split([s.response_len for s in samples]), strict=True):
            self._keep(s.name, lp)

    def add_old(self, samples: Iterable) -> None:
        """A step of several updates: the old logprobs computed before its first (with_old_logprobs)."""
        for s in samples:
            if s.old_logprobs is not None:
                self._keep(s.name, s.old_logprobs)

    def _keep(self, name: str, logprobs: torch.Tensor) -> None:
        if not name or name in self.by_name:
            return
        if logprobs.numel() > MAX_TOKENS:
            self.too_long += 1
            return
        self.by_name[name] = logprobs

    def on_host(self) -> list[tuple[str, torch.Tensor]]:
        """(name, float64 logprobs rounded to 1e-4) for each sample: one copy to the host for the step."""
        if not self.by_name:
            return []
        names = list(self.by_name)
        parts = [self.by_name[n].reshape(-1) for n in names]
        flat = torch.cat([p.to(parts[0].device, torch.float32) for p in parts]).cpu().double()
        # in float64: -1234 / 1e4 prints as -0.1234 (a float32 quotient would print 17 digits)
        rounded = (flat * 1e4).round_().div_(1e4)
        return list(zip(names, rounded.split([p.numel() for p in parts]), strict=True))

    @staticmethod
    def document(name: str, logprobs: torch.Tensor, step: int) -> dict:
        finite = torch.isfinite(logprobs)
        values = logprobs.tolist()
        if not bool(finite.all()):
            values = [v if ok else None for v, ok in zip(values, finite.tolist(), strict=True)]
        return {"schema_version": SCHEMA_VERSION, "episode_id": name, "step": step, "logprobs": values}

    def documents(self, step: int) -> list[tuple[str, dict]]:
        """(key, JSON document) for each sample."""
        return [(trainer_logprobs_key(n), self.document(n, lp, step)) for n, lp in self.on_host()]

    def write(self, store: BlobStoreBase, step: int) -> int:
        """Writes every sample's blob; returns how many were written."""
        rows = self.on_host()
        if self.too_long:
            log.info(
                "step %d: %d samples over %d response tokens have no trainer logprobs", step, self.too_long, MAX_TOKENS
            )

        def put(row: tuple[str, torch.Tensor]) -> bool:
            key = trainer_logprobs_key(row[0])
            try:
                store.put_json(key, self.document(row[0], row[1], step))
                return True
            except Exception as err:  # the UI shows no trainer logprobs for it; the step stands
                log.warning("cannot write %s: %s", key, err)
                return False

        if len(rows) <= 1:
            return sum(map(put, rows))
        with ThreadPoolExecutor(max_workers=min(WRITERS, len(rows))) as pool:
            return sum(pool.map(put, rows))

    def write_to(self, store_uri: str, step: int) -> int:
        """write() to the store at `store_uri`; a store that cannot be opened fails nothing either."""
        try:
            with closing(open_blob_store(store_uri)) as store:
                return self.write(store, step)
        except Exception as err:
            log.warning("step %d: no trainer logprobs written: %s", step, err)
            return 0
