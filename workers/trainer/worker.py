"""The trainer worker: `python -m trainer.worker --address HOST:PORT --namespace NS --task-queue Q --blob-root DIR`.

The task queue and the blob root are those of one stack (tempo-rl passes them, workers/trainer-process.ts):
a train step whose blob root is not DIR is refused, retryably.

TLS and API key come from the standard TEMPORAL_* environment variables (TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH,
TEMPORAL_TLS_CLIENT_KEY_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_SERVER_NAME); flags win.
Logs are JSON lines on stderr."""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from temporalio.client import Client, TLSConfig
from temporalio.worker import Worker

from .activities import TrainerActivities
from .train_step import Trainer

ACTIVITY_SLOTS = 8

_STD_ATTRS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)), "level": record.levelname.lower(),
                "logger": record.name, "msg": record.getMessage()}
        line.update({k: v for k, v in vars(record).items() if k not in _STD_ATTRS and not k.startswith("_")})
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def _env_bool(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


def tls_from_env() -> TLSConfig | bool:
    cert, key = os.environ.get("TEMPORAL_TLS_CLIENT_CERT_PATH"), os.environ.get("TEMPORAL_TLS_CLIENT_KEY_PATH")
    ca, name = os.environ.get("TEMPORAL_TLS_SERVER_CA_CERT_PATH"), os.environ.get("TEMPORAL_TLS_SERVER_NAME")
    if not (cert or key or ca or name):
        return _env_bool("TEMPORAL_TLS") or bool(os.environ.get("TEMPORAL_API_KEY"))
    return TLSConfig(
        client_cert=Path(cert).read_bytes() if cert else None,
        client_private_key=Path(key).read_bytes() if key else None,
        server_root_ca_cert=Path(ca).read_bytes() if ca else None,
        domain=name or None)


async def run(address: str, namespace: str, task_queue: str, blob_root: str | None = None) -> None:
    log = logging.getLogger("trainer.worker")
    client = await Client.connect(address, namespace=namespace, api_key=os.environ.get("TEMPORAL_API_KEY") or None,
                                  tls=tls_from_env())
    activities = TrainerActivities(Trainer(), blob_root)
    # One thread per activity slot. Train steps serialise on the trainer's lock (one model per
    # process) and each waiting one holds a slot, so there are slots to spare: a running step and a
    # retry waiting beside it must still leave sync_weights, log_metrics and trainer_info room.
    with ThreadPoolExecutor(max_workers=ACTIVITY_SLOTS) as pool:
        worker = Worker(client, task_queue=task_queue, activities=activities.all(), activity_executor=pool,
                        max_concurrent_activities=ACTIVITY_SLOTS)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        log.info("trainer worker started", extra={"address": address, "namespace": namespace, "task_queue": task_queue,
                                                  "blob_root": blob_root, "device": str(activities.trainer.device)})
        async with worker:
            await stop.wait()
        log.info("trainer worker stopped")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="tempo-rl trainer worker")
    parser.add_argument("--address", default=os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"))
    parser.add_argument("--namespace", default=os.environ.get("TEMPORAL_NAMESPACE", "default"))
    parser.add_argument("--task-queue", required=True, help="the stack's trainer queue (temporal.task_queues.trainer)")
    parser.add_argument("--blob-root", default=None, help="the stack's blob store; train steps for another are refused")
    parser.add_argument("--log-level", default=os.environ.get("TEMPO_RL_LOG_LEVEL", "info"))
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    level = {"trace": "DEBUG", "fatal": "CRITICAL", "silent": "CRITICAL", "warn": "WARNING"}.get(
        args.log_level.lower(), args.log_level.upper())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    asyncio.run(run(args.address, args.namespace, args.task_queue, args.blob_root))


if __name__ == "__main__":
    main()
