"""bench/gpu-trainer.sh's summary: one line per measured step of every run found in OUTDIR, and the
parity bench's memory.

    python3 bench/gpu_trainer_summary.py OUTDIR"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = (
    "run",
    "step",
    "samples",
    "tokens",
    "train_s",
    "tok/s",
    "mfu",
    "mfu_6n",
    "alloc_gib",
    "resv_gib",
    "retries",
    "checkpoint",
    "top phases (ms)",
)


def _step_row(run: str, s: dict) -> list[str]:
    mem, ck = s.get("memory", {}), s.get("checkpoint", {})
    kind = ck.get("kind", "")
    if kind == "full-background":
        kind += f" (snapshot {ck.get('snapshot_seconds', 0):.1f} s)"
    elif kind == "full-sync":
        kind += f" ({s.get('commit_s') or 0:.1f} s in the step)"
    if "background_seconds" in ck:
        kind += f"; an earlier write took {ck['background_seconds']:.1f} s"
    top = ", ".join(f"{k} {v:.0f}" for k, v in list(s.get("phases_ms", {}).items())[:3])
    return [
        run,
        str(s["step"]),
        str(s["samples"]),
        str(s["tokens"]),
        f"{s['train_s']:.1f}",
        f"{s['tokens_per_s']:.0f}",
        f"{s['mfu']:.3f}",
        f"{s['mfu_6n']:.3f}",
        f"{mem.get('train_peak_allocated_gib', 0):.1f}",
        f"{mem.get('train_peak_reserved_gib', 0):.1f}",
        f"{mem.get('train_alloc_retries', 0):.0f}",
        kind,
        top,
    ]


def summary(out: Path) -> str:
    rows = [list(COLUMNS)]
    notes = []
    for path in sorted(out.glob("trainer-*.json")):
        run = path.stem.removeprefix("trainer-")
        doc = json.loads(path.read_text())
        rows += [_step_row(run, s) for s in doc.get("steps", [])]
        if doc.get("summary"):
            notes.append(f"{run}: steady state {json.dumps(doc['summary'])}")
        if doc.get("stopped"):
            notes.append(f"{run}: {doc['stopped']}")
        if doc.get("out_of_memory"):
            notes.append(f"{run}: OUT OF MEMORY {json.dumps(doc['out_of_memory'])}")
    parity = out / "parity-memory.json"
    if parity.is_file() and parity.stat().st_size:
        p = json.loads(parity.read_text())
        notes.append(
            f"parity (trainer side, {p.get('sample_tokens')} tokens in {p.get('micro_batches')} micro-batches):"
            f" peak {p.get('trainer_peak_allocated_gib')} GiB allocated, {p.get('trainer_peak_reserved_gib')}"
            f" reserved, the model {p.get('model_gib')} GiB, {p.get('score_s')} s"
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)) for r in rows]
    return "\n".join(lines + [""] + notes)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])))
