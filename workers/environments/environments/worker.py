"""The environment worker: `python -m environments --task-queue Q [--address HOST:PORT --namespace NS]`.

Serves the environment activities of one stack on its own task queue (`environments-<hash>`,
config/load.ts), started, recorded and stopped by tempo-rl like the other workers
(supervise/stack.ts): `python_env.workers` processes poll the queue, so more processes run more
episodes at once. Each process also polls a queue of its own (`<queue>-<random>`): an OpenEnv
episode's steps go to the process that holds its session (openenv_env.py), and to the shared queue
once that process is gone. The connection comes from temporalio.envconfig: the TEMPORAL_* variables tempo-rl
resolved (--no-config-file), --address and --namespace winning. Logs are JSON lines on stderr.
It imports nothing from the trainer (workers/trainer) and runs in a Python environment of its own
(workers/environments/pyproject.toml)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
import uuid
from typing import Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfig
from temporalio.worker import Worker

from .openenv_env import OpenEnvEnvironments
from .verifiers_env import VerifiersEnvironments

DEFAULT_ADDRESS = "127.0.0.1:7233"
EPISODE_SLOTS = 16
"""Episodes one process runs at once: each mostly waits on its model calls."""


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def connect_kwargs(address: str | None, namespace: str | None, config_file: bool) -> dict[str, Any]:
    kwargs: dict[str, Any] = dict(ClientConfig.load_client_connect_config(disable_file=not config_file))
    kwargs["target_host"] = address or kwargs.get("target_host") or DEFAULT_ADDRESS
    kwargs["namespace"] = namespace or kwargs.get("namespace") or "default"
    return kwargs


async def run(connect: dict[str, Any], task_queue: str, slots: int = EPISODE_SLOTS) -> None:
    log = logging.getLogger("environments.worker")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    client = await Client.connect(**connect)
    verifiers = VerifiersEnvironments(client)
    own_queue = f"{task_queue}-{uuid.uuid4().hex[:12]}"
    openenv = OpenEnvEnvironments(own_queue)
    worker = Worker(
        client,
        task_queue=task_queue,
        activities=[verifiers.run_episode, openenv.reset, openenv.step, openenv.close_session],
        max_concurrent_activities=slots,
    )
    # The OpenEnv sessions this process holds: their steps come here while it lives.
    sessions = Worker(
        client,
        task_queue=own_queue,
        activities=[openenv.step, openenv.close_session],
        max_concurrent_activities=slots,
    )
    log.info(
        "environment worker started",
        extra={"address": connect["target_host"], "namespace": connect["namespace"], "task_queue": task_queue},
    )
    # One write (whoever waits for it may close the pipe on reading it), then stdout is done with.
    sys.stdout.write(json.dumps({"environment_worker": "ready", "pid": os.getpid(), "task_queue": task_queue}) + "\n")
    sys.stdout.flush()
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    async with worker, sessions:
        await stop.wait()
    await verifiers.close()
    await openenv.close()
    log.info("environment worker stopped")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m environments", description="tempo-rl environment worker")
    parser.add_argument(
        "--address", default=None, help=f"host:port; default: the envconfig profile, else {DEFAULT_ADDRESS}"
    )
    parser.add_argument("--namespace", default=None, help="default: the envconfig profile, else default")
    parser.add_argument(
        "--no-config-file", action="store_true", help="only the TEMPORAL_* variables (tempo-rl resolved them)"
    )
    parser.add_argument(
        "--task-queue", required=True, help="the stack's environment queue (temporal.task_queues.environments)"
    )
    parser.add_argument("--slots", type=int, default=EPISODE_SLOTS, help="episodes this process runs at once")
    parser.add_argument("--log-level", default=os.environ.get("TEMPO_RL_LOG_LEVEL", "info"))
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    level = {"trace": "DEBUG", "fatal": "CRITICAL", "silent": "CRITICAL", "warn": "WARNING"}.get(
        args.log_level.lower(), args.log_level.upper()
    )
    logging.basicConfig(level=level, handlers=[handler], force=True)
    # A line per HTTP request (the OpenEnv servers' health and schema reads) is noise at info.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    asyncio.run(run(connect_kwargs(args.address, args.namespace, not args.no_config_file), args.task_queue, args.slots))
