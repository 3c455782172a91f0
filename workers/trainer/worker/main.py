"""The trainer worker: `python -m trainer.worker --address HOST:PORT --namespace NS --task-queue Q --blob-store URI
[--lock-file F --inflight-dir D]`.

The task queue and the blob store are those of one stack (tempo-rl passes them, supervise/trainer-process.ts):
a train step whose blob store is not URI is refused, retryably.

Active and standby (standby.py): with --lock-file, the process that holds an exclusive lock on F is
the stack's active trainer; any other waits on the lock with its imports done (torch, transformers,
the SDK: most of a trainer's start-up), its client connected and its worker built, polling nothing.
The kernel frees the lock the moment the active process dies, SIGKILL included, so a standby takes
over at once. Whoever becomes active first fails the activities that dead trainers left in the
in-flight ledger (--inflight-dir, inflight.py), so their retries start now instead of after the
heartbeat timeout.

The connection (address, namespace, API key, TLS) comes from temporalio.envconfig: a profile of the
standard Temporal config file (TEMPORAL_CONFIG_FILE, TEMPORAL_PROFILE) under the standard TEMPORAL_*
variables; --address and --namespace win. tempo-rl passes --no-config-file with the settings it
resolved as TEMPORAL_* variables (supervise/trainer-process.ts).
Logs are JSON lines on stderr.

Data parallelism (model.num_gpus > 1): started by torchrun, one process per GPU; rank 0 alone is the
Temporal worker (and takes the lock), the other ranks follow its commands (data_parallel.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from collections.abc import Callable, Mapping

from temporalio.client import Client
from temporalio.envconfig import ClientConfig
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from .inflight import WORKER_DIED, InflightLedger
from .standby import TrainerLock, import_at_low_priority

ACTIVITY_SLOTS = 8
# More activities for a worker to serve, from the product's (its TrainerActivities): the tests' own.
ExtraActivities = Callable[[Any], list]
DEFAULT_ADDRESS = "127.0.0.1:7233"

_STD_ATTRS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STD_ATTRS and not k.startswith("_")})
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def connect_kwargs(
    address: str | None = None,
    namespace: str | None = None,
    *,
    config_file: bool = True,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Client.connect's keyword arguments: the envconfig profile (file unless `config_file` is False,
    then the TEMPORAL_* variables of `env`, default os.environ), then the flags."""
    kwargs: dict[str, Any] = dict(
        ClientConfig.load_client_connect_config(disable_file=not config_file, override_env_vars=env)
    )
    kwargs["target_host"] = address or kwargs.get("target_host") or DEFAULT_ADDRESS
    kwargs["namespace"] = namespace or kwargs.get("namespace") or "default"
    return kwargs


async def fail_over_dead_trainers(client: Client, ledger: InflightLedger) -> None:
    async def fail(token: bytes, reason: str) -> None:
        await client.get_async_activity_handle(task_token=token).fail(ApplicationError(reason, type=WORKER_DIED))

    done = await ledger.fail_over_dead(fail)
    if done:
        logging.getLogger("trainer.worker").warning(
            "failed over the activities of a dead trainer",
            extra={"activities": [f"{e['workflow_id']}/{e['activity_type']}" for e in done]},
        )


async def _active(lock: TrainerLock, stop: asyncio.Event) -> bool:
    """Waits (in a daemon thread: a standby may be stopped while it waits) until this process is the
    active trainer; False if `stop` came first."""
    loop = asyncio.get_running_loop()
    got: asyncio.Future = loop.create_future()

    def wait() -> None:
        lock.acquire()
        loop.call_soon_threadsafe(lambda: got.done() or got.set_result(True))

    threading.Thread(target=wait, name="trainer-lock", daemon=True).start()
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([got, stopped], return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    return got.done()


async def run(
    connect: dict[str, Any],
    task_queue: str,
    blob_store: str | None = None,
    inflight_dir: str | None = None,
    lock: TrainerLock | None = None,
    trainer=None,
    scratch_dir: str | None = None,
    extra_activities: ExtraActivities | None = None,
) -> None:
    """`extra_activities`: more activities beside the product's, made from its TrainerActivities (the
    tests' worker adds its own: testing/trainer_worker.py)."""
    from .activities import TrainerActivities  # torch, transformers: a standby imports them before it waits
    from ..step.train_step import Trainer

    log = logging.getLogger("trainer.worker")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # Everything up to polling is done before waiting for the lock: a standby that takes over only polls.
    client = await Client.connect(**connect)
    ledger = InflightLedger(inflight_dir) if inflight_dir else None
    activities = TrainerActivities(trainer or Trainer(), blob_store, scratch_dir)
    # One thread per activity slot. Train steps serialise on the trainer's lock (one model per
    # process) and each waiting one holds a slot, so there are slots to spare: a running step and a
    # retry waiting beside it must still leave sync_weights and log_metrics room.
    with ThreadPoolExecutor(max_workers=ACTIVITY_SLOTS) as pool:
        worker = Worker(
            client,
            task_queue=task_queue,
            activities=[*activities.all(), *(extra_activities(activities) if extra_activities else [])],
            activity_executor=pool,
            max_concurrent_activities=ACTIVITY_SLOTS,
            interceptors=_interceptors(ledger),
        )
        if lock is not None and not await _active(lock, stop):
            log.info("standby stopped")
            return
        if ledger is not None:
            await fail_over_dead_trainers(client, ledger)
        if lock is not None:
            lock.mark_polling()
        log.info(
            "trainer worker started",
            extra={
                "address": connect["target_host"],
                "namespace": connect["namespace"],
                "task_queue": task_queue,
                "blob_store": blob_store,
                "device": str(activities.trainer.device),
            },
        )
        async with worker:
            await stop.wait()
        if ledger is not None:
            ledger.close()
        log.info("trainer worker stopped")


def main(argv: list[str] | None = None, extra_activities: ExtraActivities | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m trainer.worker", description="tempo-rl trainer worker")
    parser.add_argument(
        "--address", default=None, help="host:port; default: the envconfig profile, else " + DEFAULT_ADDRESS
    )
    parser.add_argument("--namespace", default=None, help="default: the envconfig profile, else default")
    parser.add_argument(
        "--no-config-file",
        action="store_true",
        help="read no Temporal config file, only the TEMPORAL_* variables (tempo-rl resolved them)",
    )
    parser.add_argument("--task-queue", required=True, help="the stack's trainer queue (temporal.task_queues.trainer)")
    parser.add_argument(
        "--blob-store",
        default=None,
        help="the stack's blob store (s3://bucket/prefix, file:///dir or a directory); train steps for another are refused",
    )
    parser.add_argument(
        "--scratch-dir",
        default=None,
        help="this host's copy of runs whose blob store is remote (s3://): checkpoints are committed in"
        " the store and cached here; default $TEMPO_RL_CACHE/trainer-scratch",
    )
    parser.add_argument(
        "--lock-file", default=None, help="the stack's trainer lock: its holder is active, others stand by"
    )
    parser.add_argument("--inflight-dir", default=None, help="the stack's in-flight ledger of trainer activities")
    parser.add_argument("--log-level", default=os.environ.get("TEMPO_RL_LOG_LEVEL", "info"))
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    level = {"trace": "DEBUG", "fatal": "CRITICAL", "silent": "CRITICAL", "warn": "WARNING"}.get(
        args.log_level.lower(), args.log_level.upper()
    )
    logging.basicConfig(level=level, handlers=[handler], force=True)
    group = trainer = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from .data_parallel import DataParallelTrainer, follow
        from .dp_group import DataParallelGroup

        group = DataParallelGroup()
        trainer = DataParallelTrainer(group)
        if not group.is_rank0:
            try:
                follow(group, trainer)
            finally:
                group.close()
            return
    lock = TrainerLock(args.lock_file) if args.lock_file else None
    if lock is not None and not lock.try_acquire():
        lock.wait_until_active_polls()  # another trainer is active or starting: let it start first
        if not lock.held:
            import_at_low_priority(["trainer.worker.activities", "trainer.step.train_step"])
    try:
        connect = connect_kwargs(args.address, args.namespace, config_file=not args.no_config_file)
        asyncio.run(
            run(
                connect,
                args.task_queue,
                args.blob_store,
                args.inflight_dir,
                lock,
                trainer,
                args.scratch_dir,
                extra_activities,
            )
        )
    finally:
        if group is not None:
            group.send(None)  # the other ranks stop too
            group.close()


if __name__ == "__main__":
    main()


def _interceptors(ledger: InflightLedger | None) -> list:
    """The in-flight ledger's, and the kill points' when TEMPO_RL_KILL_AT names some (docs/certification.md)."""
    from ..kill_points import process_kill_points

    kills = process_kill_points()
    return [i for i in (ledger.interceptor() if ledger else None, kills.interceptor() if kills.points else None) if i]
