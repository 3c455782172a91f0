"""The stack's trainer lock: its holder is the active trainer, every other trainer process stands by.

A trainer that finds the lock free at its start takes it at once, before its heavy imports, so the
process started first is the active one. One that finds it held waits until the active trainer polls
(its pid, then "ready", in the lock file) before importing torch and transformers, so a standby does
not slow the active trainer's start; it then registers in `<lock>.standby/` and blocks on the lock. The
kernel frees an flock the moment its holder dies, SIGKILL included: a standby takes over at once.

Those imports are ~15–20 s of a core, made just as the active trainer takes its first steps: a standby
makes them on a thread at the lowest CPU priority (`import_at_low_priority`), so they use what the
active trainer leaves idle (on 2 cores they had slowed its first six steps to twice their time)."""

from __future__ import annotations

import fcntl
import importlib
import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger("trainer.worker")
POLL_S = 0.25


class TrainerLock:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.standby_dir = Path(f"{self.path}.standby")
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.held = False

    def _write(self, text: str) -> None:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, text.encode(), 0)

    def _read(self) -> str:
        return os.pread(self.fd, 64, 0).decode(errors="replace").strip()

    def try_acquire(self) -> bool:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.held = True
        self._write(f"{os.getpid()}\n")
        return True

    def wait_until_active_polls(self) -> None:
        """Returns once the active trainer polls, or once this process holds the lock itself."""
        while not self.held and not self._read().endswith("ready") and not self.try_acquire():
            time.sleep(POLL_S)

    def acquire(self) -> None:
        """Blocks until this process holds the lock (at once when it is free)."""
        if self.held or self.try_acquire():
            return
        holder = self._read().split(" ")[0]
        marker = self.standby_dir / str(os.getpid())
        self.standby_dir.mkdir(parents=True, exist_ok=True)
        marker.touch()
        log.info("standby: waiting for the active trainer", extra={"active_pid": holder, "lock_file": str(self.path)})
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        finally:
            marker.unlink(missing_ok=True)
        self.held = True
        self._write(f"{os.getpid()}\n")
        log.info("taking over as the active trainer", extra={"previous_pid": holder})

    def mark_polling(self) -> None:
        self._write(f"{os.getpid()} ready\n")


def import_at_low_priority(modules: list[str]) -> None:
    """Imports `modules` on a thread of nice 19 and waits for it. Linux's nice is per thread: the
    process's other threads (and those it starts later, the compute pool of a standby that takes over)
    keep their priority. Where the priority cannot be set, the imports run as they are."""
    failed: list[BaseException] = []

    def work() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (OSError, AttributeError):
            pass
        try:
            for name in modules:
                importlib.import_module(name)
        except BaseException as err:  # re-raised on the caller's thread
            failed.append(err)

    thread = threading.Thread(target=work, name="standby-imports")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
