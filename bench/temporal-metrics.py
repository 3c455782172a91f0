"""Where a Temporal server's time went during a bench: its Prometheus metrics (the dump bench/gpu-rollout.sh
keeps as NAME-server-metrics.txt), each latency histogram's series by total seconds, with its count and
mean, and the task queues' sync-match share.

    python3 bench/temporal-metrics.py DUMP [--top 25] [--json]

A series is a histogram's name with its operation, service and task type labels (the rest summed);
sync match: poll_success_sync ÷ poll_success (a task handed straight to a waiting poller, not written
to the database and read back)."""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+([-+0-9.eEinfNa]+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
KEPT = ("operation", "service_name", "task_type", "task_category", "queue_type")


def parse(text: str):
    """(name, kept labels, value) of each sample line."""
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(2) or ""))
        yield m.group(1), tuple((k, labels[k]) for k in KEPT if k in labels), float(m.group(3))


def summarize(text: str, top: int) -> dict:
    sums: dict = defaultdict(float)
    counts: dict = defaultdict(float)
    totals: dict = defaultdict(float)
    for name, labels, value in parse(text):
        if name.endswith("_sum"):
            sums[(name[:-4], labels)] += value
        elif name.endswith("_count"):
            counts[(name[:-6], labels)] += value
        elif not name.endswith("_bucket"):
            totals[name] += value
    series = [
        {
            "metric": name,
            **dict(labels),
            "count": int(counts[(name, labels)]),
            "total_s": round(s, 3),
            "mean_ms": round(1000 * s / counts[(name, labels)], 3),
        }
        for (name, labels), s in sums.items()
        if counts.get((name, labels)) and "latency" in name
    ]
    series.sort(key=lambda r: r["total_s"], reverse=True)
    polls, synced = totals.get("poll_success", 0.0), totals.get("poll_success_sync", 0.0)
    return {"sync_match": round(synced / polls, 4) if polls else None, "polls": int(polls), "latencies": series[:top]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = summarize(args.dump.read_text(), args.top)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"sync match: {out['sync_match']} of {out['polls']} polls that got a task")
    for r in out["latencies"]:
        labels = " ".join(f"{k}={r[k]}" for k in KEPT if k in r)
        print(f"{r['total_s']:10.3f} s  {r['count']:8d} × {r['mean_ms']:9.3f} ms  {r['metric']}  {labels}")


if __name__ == "__main__":
    main()
