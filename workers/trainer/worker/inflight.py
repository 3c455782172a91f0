"""The trainer's in-flight ledger, the same on-disk form as the rollout worker's (rollout/inflight.ts).

Each trainer process notes the task token of each activity it runs in a folder of its own
(`<state_dir>/workers/inflight/trainer/<pid>-<start time>-<host>/`). The trainer that starts next on
this host — a standby taking over, or a restart — fails the activities that a dead trainer left there,
at once and retryably (type WorkerDied), so their retry is scheduled now rather than after the
heartbeat timeout, which stays the fallback for a dead host."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shutil
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

WORKER_DIED = "WorkerDied"
log = logging.getLogger(__name__)


def process_start_time(pid: int) -> str:
    """Clock ticks since boot (/proc/PID/stat field 22), "" where unknown: with the pid it names one process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rindex(")") + 2 :].split(" ")
    return fields[19] if len(fields) > 19 else ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2 :].split(" ")[0] != "Z"
    except OSError:
        return True


class InflightLedger:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.dir = self.root / f"{os.getpid()}-{process_start_time(os.getpid())}-{socket.gethostname()}"

    def note(self, info: activity.Info) -> Path | None:
        """The note's path, or None when it could not be written: the ledger only speeds recovery up,
        so a full disk never fails the activity itself."""
        file = self.dir / f"{hashlib.sha256(info.task_token).hexdigest()[:32]}.json"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            file.write_text(
                json.dumps(
                    {
                        "task_token": base64.b64encode(info.task_token).decode(),
                        "activity_type": info.activity_type,
                        "activity_id": info.activity_id,
                        "workflow_id": info.workflow_id,
                    }
                )
            )
        except OSError as err:
            log.warning("could not note an activity in the in-flight ledger", extra={"error": str(err)})
            return None
        return file

    async def fail_over_dead(self, fail: Callable[[bytes, str], Awaitable[Any]]) -> list[dict]:
        """Fails, through `fail`, each activity that a dead process of this host left in the ledger,
        then removes its folder. An attempt that already ended makes `fail` raise: nothing to hand over."""
        host, done = socket.gethostname(), []
        if not self.root.is_dir():
            return done
        for entry_dir in self.root.iterdir():
            pid_text, _, rest = entry_dir.name.partition("-")
            start, _, entry_host = rest.partition("-")
            if entry_host != host or not pid_text.isdigit() or int(pid_text) == os.getpid():
                continue
            pid = int(pid_text)
            if _alive(pid) and process_start_time(pid) == start:
                continue
            for file in entry_dir.glob("*.json"):
                try:
                    entry = json.loads(file.read_text())
                except (OSError, ValueError):
                    continue  # cut short by the death it records
                reason = (
                    f"worker process {pid} on {host} died while running {entry['activity_type']}"
                    f" ({entry['workflow_id']}); failed over by process {os.getpid()}"
                )
                try:
                    await fail(base64.b64decode(entry["task_token"]), reason)
                    done.append(entry)
                except Exception:  # noqa: BLE001 - the attempt ended or timed out already
                    pass
            shutil.rmtree(entry_dir, ignore_errors=True)
        return done

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def interceptor(self) -> Interceptor:
        ledger = self

        class _Inbound(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                file = ledger.note(activity.info())
                try:
                    return await self.next.execute_activity(input)
                finally:
                    if file is not None:
                        file.unlink(missing_ok=True)

        class _Interceptor(Interceptor):
            def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
                return _Inbound(next)

        return _Interceptor()
