"""Kill points on the trainer's side (trainer/kill_points.py): read strictly, fire at the nth
arrival of a point in its phase, once across processes, with a real SIGKILL."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.kill_points import KILL_AT_ENV, points_from_env

WORKERS = str(Path(__file__).resolve().parents[2] / "workers")


def test_bad_values_are_refused_by_name():
    assert points_from_env({}) == []
    with pytest.raises(ValueError, match="not JSON"):
        points_from_env({KILL_AT_ENV: "{"})
    with pytest.raises(ValueError, match="after_ms"):
        points_from_env({KILL_AT_ENV: json.dumps([{"point": "x", "phase": "mid", "once": "f"}])})
    with pytest.raises(ValueError, match="when"):
        points_from_env({KILL_AT_ENV: json.dumps([{"point": "x", "phase": "end", "once": "f", "when": 1}])})


def _reach(once: Path, phase: str) -> subprocess.CompletedProcess:
    script = (
        "from trainer.kill_points import process_kill_points\n"
        "k = process_kill_points()\n"
        "for i in range(1, 4):\n"
        "    k.reach('checkpoint_commit', 'start'); k.reach('checkpoint_commit', 'end'); print('survived', i, flush=True)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": WORKERS,
        KILL_AT_ENV: json.dumps([{"point": "checkpoint_commit", "phase": phase, "nth": 2, "once": str(once)}]),
    }
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)


def test_a_point_fires_in_its_phase_at_the_nth_arrival_once(tmp_path):
    once = tmp_path / "fired"
    first = _reach(once, "end")
    assert first.returncode == -signal.SIGKILL
    assert first.stdout == "survived 1\n"
    assert once.exists()
    again = _reach(once, "end")
    assert again.returncode == 0 and "survived 3" in again.stdout
