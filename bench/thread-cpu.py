"""CPU seconds by OS thread of the processes whose command line matches a pattern, sampled from /proc
while a bench runs beside it: where a rollout worker's CPU goes outside what a V8 profile shows (the
Temporal core's Rust threads, V8's platform threads, libuv's pool). A thread that ends between two
samples is counted up to its last one (Node's per-call watchdog threads are not counted at all: they
live for one call).

    python3 bench/thread-cpu.py 'overhead-worker' 150 &
    node --import tsx bench/overhead.ts --part b --b-episodes 512 --b-concurrency 64 --b-latency 1000-4000

Linux only. Threads are named by their name in the kernel (Node's own threads, V8's platform threads
and the main thread all read `node`: the main thread is marked `main`) and their thread id.
"""

import argparse
import collections
import os
import re
import time


def threads(pattern: re.Pattern[str]) -> dict[tuple[int, int], tuple[str, str, int]]:
    """(pid, tid) → (what matched, thread name, CPU ticks) for every matching process's threads now."""
    out: dict[tuple[int, int], tuple[str, str, int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            match = pattern.search(cmd)
            tids = os.listdir(f"/proc/{pid}/task") if match else []
        except OSError:
            continue  # the process ended between the listing and the read
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            out[(int(pid), int(tid))] = (match.group(0), name, int(fields[11]) + int(fields[12]))  # utime + stime
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pattern", help="a regular expression matched against each process's command line")
    ap.add_argument("seconds", type=float, help="how long to sample")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between samples (default 0.5)")
    ap.add_argument("--top", type=int, default=30, help="threads to print (default 30)")
    args = ap.parse_args()
    pattern = re.compile(args.pattern)
    seen: dict[tuple[int, int], tuple[str, str, int]] = {}
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        seen.update(threads(pattern))
        time.sleep(args.every)
    hz = os.sysconf("SC_CLK_TCK")
    rows = collections.Counter()
    for (pid, tid), (what, name, ticks) in seen.items():
        rows[(what, pid, f"{name} {'main' if pid == tid else tid}")] += ticks
    print(f"{'CPU s':>8}  {'process':30} {'pid':>8}  thread")
    for (what, pid, thread), ticks in rows.most_common(args.top):
        print(f"{ticks / hz:8.2f}  {what[:30]:30} {pid:>8}  {thread}")


if __name__ == "__main__":
    main()
