"""The trainer's failover: the in-flight ledger hands a dead trainer's activities to its
successor at once, and the trainer lock keeps one process active while standbys wait. The live
version — a SIGKILLed trainer whose standby takes over a real run — is tests/ts/run-crash.test.ts."""

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainer.worker.inflight import InflightLedger, process_start_time
from trainer.worker.standby import TrainerLock


def _info(token: bytes, activity_type: str = "train_step"):
    return SimpleNamespace(task_token=token, activity_type=activity_type, activity_id="7", workflow_id="run/x")


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_dead_process_activities_are_failed_over_and_its_folder_removed(tmp_path):
    mine = InflightLedger(tmp_path)
    mine.note(_info(b"my-own"))
    # A dead trainer's folder (its pid is gone), as it left it: two activities, one already ended.
    dead = tmp_path / f"{_dead_pid()}-123-{os.uname().nodename}"
    dead.mkdir()
    other = InflightLedger(tmp_path)
    other.dir = dead
    other.note(_info(b"token-a"))
    other.note(_info(b"token-b", "sync_weights"))
    # A live process of this host (pid 1, its real start time) and a process of another host: untouched.
    live = tmp_path / f"1-{process_start_time(1)}-{os.uname().nodename}"
    elsewhere = tmp_path / f"{_dead_pid()}-1-another-host"
    for d in (live, elsewhere):
        d.mkdir()
        (d / "x.json").write_text(
            '{"task_token": "eA==", "activity_type": "t", "activity_id": "1", "workflow_id": "w"}'
        )

    failed: list[tuple[bytes, str]] = []

    async def fail(token: bytes, reason: str) -> None:
        if token == b"token-b":
            raise RuntimeError("NotFound: the attempt already ended")
        failed.append((token, reason))

    done = asyncio.run(mine.fail_over_dead(fail))
    assert [t for t, _ in failed] == [b"token-a"]
    assert "died while running train_step" in failed[0][1]
    assert [e["activity_type"] for e in done] == ["train_step"]
    assert not dead.exists(), "the dead process's folder is removed"
    assert live.exists() and elsewhere.exists() and mine.dir.exists()


def test_a_reused_pid_does_not_hide_a_dead_process(tmp_path):
    # Our own pid with another start time is another (dead) process that once had this pid.
    ghost = tmp_path / f"1-0-{os.uname().nodename}"
    ghost.mkdir()
    (ghost / "a.json").write_text(
        '{"task_token": "YQ==", "activity_type": "t", "activity_id": "1", "workflow_id": "w"}'
    )
    failed = []

    async def fail(token: bytes, reason: str) -> None:
        failed.append(token)

    asyncio.run(InflightLedger(tmp_path).fail_over_dead(fail))
    assert failed == [b"a"]


def test_the_interceptor_notes_an_activity_while_it_runs(tmp_path):
    ledger = InflightLedger(tmp_path)
    seen = {}

    class Next:
        async def execute_activity(self, input):
            seen["during"] = sorted(p.name for p in ledger.dir.iterdir())
            return "done"

    inbound = ledger.interceptor().intercept_activity(Next())
    import trainer.worker.inflight as inflight

    real = inflight.activity.info
    inflight.activity.info = lambda: _info(b"tok")
    try:
        assert asyncio.run(inbound.execute_activity(None)) == "done"
    finally:
        inflight.activity.info = real
    assert len(seen["during"]) == 1
    assert list(ledger.dir.iterdir()) == [], "the note is removed when the activity ends"


def test_a_standby_waits_for_the_lock_and_takes_over_when_the_active_trainer_dies(tmp_path):
    lock = tmp_path / "trainer.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from trainer.worker.standby import TrainerLock; l = TrainerLock(sys.argv[1]);"
            " l.acquire(); print('active', flush=True); time.sleep(1.5); l.mark_polling(); time.sleep(600)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "workers")},
    )
    try:
        assert holder.stdout.readline().strip() == "active"
        assert lock.read_text().strip() == str(holder.pid)
        standby = TrainerLock(lock)
        assert not standby.try_acquire()
        standby.wait_until_active_polls()
        assert lock.read_text().strip() == f"{holder.pid} ready", "a standby imports only once the active trainer polls"
        took = threading.Event()
        threading.Thread(target=lambda: (standby.acquire(), took.set()), daemon=True).start()
        assert not took.wait(1.0), "the standby waits while the active trainer lives"
        assert [p.name for p in standby.standby_dir.iterdir()] == [str(os.getpid())], "it is listed as a ready standby"
        holder.kill()
        holder.wait()
        assert took.wait(10.0), "the standby takes over once the active trainer is gone"
        assert lock.read_text().strip() == str(os.getpid())
        assert list(standby.standby_dir.iterdir()) == [], "no longer a standby"
    finally:
        holder.kill()


def test_a_standby_imports_at_the_lowest_priority_and_keeps_its_own(tmp_path, monkeypatch):
    """The standby's heavy imports run on a nice-19 thread (they must not slow the active trainer's
    first steps); the calling thread keeps its nice value, and an import error reaches the caller."""
    from trainer.worker.standby import import_at_low_priority

    (tmp_path / "probe_standby_nice.py").write_text(
        "import os, threading\nNICE = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())\n"
    )
    (tmp_path / "probe_standby_broken.py").write_text("raise ImportError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    import_at_low_priority(["probe_standby_nice"])
    assert sys.modules["probe_standby_nice"].NICE == 19
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
    with pytest.raises(ImportError, match="broken on purpose"):
        import_at_low_priority(["probe_standby_broken"])
