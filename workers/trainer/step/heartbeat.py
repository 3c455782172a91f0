"""Heartbeats from a side thread, so that a phase with no natural progress points (loading a
checkpoint, saving one, an engine's reload, waiting for the trainer's lock) still heartbeats.

The thread runs in a copy of the caller's contextvars: the Temporal Python SDK finds the current
activity through a contextvar, which a plain thread does not inherit, and its heartbeat function is
safe to call from any thread (it hands the details to the worker's event loop).

A side thread keeps heartbeating while the activity's own thread is stuck (a hang, not a crash): the
heartbeat timeout then detects dead processes only, and a hang waits for the start-to-close timeout."""

from __future__ import annotations

import contextvars
import logging
import threading

# Well under the trainer activities' heartbeat timeout (workflows/training-run.ts, 10 s).
HEARTBEAT_INTERVAL_S = 1.0

log = logging.getLogger(__name__)


class Heartbeater:
    """A Progress that also repeats its latest details every HEARTBEAT_INTERVAL_S from a side thread
    while it is entered: `with Heartbeater(progress) as beat: beat.heartbeat({"phase": ...})`."""

    def __init__(self, progress):
        self._progress = progress
        self._details: dict = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def heartbeat(self, details: dict) -> None:
        """Records the details the side thread repeats, and sends them now."""
        self._details = dict(details)
        self._send()

    def is_cancelled(self) -> bool:
        return self._progress.is_cancelled()

    def _send(self) -> None:
        try:
            self._progress.heartbeat(self._details)
        except Exception as err:  # a lost heartbeat must not fail the step; the next one may pass
            log.warning("heartbeat failed", extra={"error": repr(err)})

    def _repeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_INTERVAL_S):
            self._send()

    def __enter__(self) -> Heartbeater:
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._repeat,), name="heartbeater", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
