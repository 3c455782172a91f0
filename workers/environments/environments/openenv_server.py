"""An OpenEnv environment server as a local process of the environment worker
(`python_env.openenv.app: module:attr`, an ASGI app such as openenv's `create_app(...)`).

Served by uvicorn in the worker's own Python, on a socket the worker binds (127.0.0.1, a free port,
handed over by file descriptor: no port race, nothing listening beyond this host). The server dies
with the worker (PR_SET_PDEATHSIG), so a worker killed outright leaves no server behind; a server
that dies is started again when a session needs it (openenv_env.py rebuilds the session
by replay)."""

from __future__ import annotations

import asyncio
import collections
import ctypes
import importlib.util
import logging
import os
import re
import signal
import socket
import sys
import time

import httpx

from .errors import BAD_ENVIRONMENT, NOT_INSTALLED, fail

log = logging.getLogger("environments.openenv")

APP = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
START_TIMEOUT_S = 120.0
"""openenv-core imports gradio and fastmcp on start: seconds on a busy CPU."""
PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def check_app(app: str) -> None:
    """The app is `module:attr` and its module is installed in the worker's Python (not imported here:
    the environment's code runs in its own process)."""
    if not APP.match(app):
        raise fail(BAD_ENVIRONMENT, f"python_env.openenv.app {app!r} is not module:attr (e.g. tempo_rl_guess:app)")
    module = app.split(":", 1)[0]
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as err:
        found, why = None, f" ({err})"
    else:
        why = ""
    if found is None:
        raise fail(
            NOT_INSTALLED,
            f"OpenEnv app {app!r}: module {module!r} is not installed in the environment worker's Python{why};"
            " install its package there (docs/environments.md)",
        )


class LocalServer:
    """One app's server process, started on first use and again after it died."""

    def __init__(self, app: str) -> None:
        self.app = app
        self.proc: asyncio.subprocess.Process | None = None
        self.url = ""
        self.lock = asyncio.Lock()
        self.stderr: collections.deque[str] = collections.deque(maxlen=20)
        self.starts = 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def ensure(self) -> str:
        """The server's URL, starting it when it is not running."""
        async with self.lock:
            if not self.alive():
                await self._start()
            return self.url

    async def _start(self) -> None:
        check_app(self.app)
        if self.proc is not None:
            log.warning("OpenEnv server %s exited (%s): starting it again", self.app, self.proc.returncode)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        fd = sock.fileno()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *("-m", "uvicorn", self.app, "--fd", str(fd), "--log-level", "warning", "--no-access-log"),
                pass_fds=(fd,),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                preexec_fn=_die_with_parent,
                env={**os.environ, "ENABLE_WEB_INTERFACE": "false"},
            )
        finally:
            sock.close()  # the child holds its own copy
        self.starts += 1
        self.url = f"http://127.0.0.1:{port}"
        self.stderr.clear()
        asyncio.create_task(self._read_stderr(self.proc))
        await self._wait_ready()
        log.info("OpenEnv server %s started at %s (pid %s)", self.app, self.url, self.proc.pid)

    async def _read_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        async for line in proc.stderr:
            text = line.decode(errors="replace").rstrip()
            self.stderr.append(text)
            log.debug("OpenEnv server %s: %s", self.app, text)

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        async with httpx.AsyncClient(timeout=2.0) as http:
            while time.monotonic() < deadline:
                if not self.alive():
                    await asyncio.sleep(0.2)  # the last lines of its stderr
                    raise fail(
                        BAD_ENVIRONMENT,
                        f"OpenEnv app {self.app!r} exited before it served (code {self.proc.returncode}):"
                        f" {' | '.join(list(self.stderr)[-6:]) or 'no output'}",
                    )
                try:
                    if (await http.get(f"{self.url}/health")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
        await self.stop()
        raise fail(BAD_ENVIRONMENT, f"OpenEnv app {self.app!r} did not answer /health within {START_TIMEOUT_S:.0f} s")

    async def stop(self) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.terminate()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
