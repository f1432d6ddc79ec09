"""An OpenEnv app served for one run (`environment.name=openenv:module:app` or
`openenv:path/server.py:app`): uvicorn in a subprocess on 127.0.0.1 at a free port, what
`uvicorn module:app` would serve, ready once it answers GET /health; stopped at exit, and
exiting by itself when the trainer dies."""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from rlvr.errors import ConfigError


class LocalServer:
    """An OpenEnv app ('module:app' or 'path/file.py:app') served by uvicorn in a subprocess on
    127.0.0.1 at a free port for this process's life: stopped at exit, and exiting by itself
    when this process dies. Out of the terminal's process group, so a Ctrl-C that the trainer
    turns into a checkpoint does not stop it first."""

    def __init__(self, ref: str, startup_s: float) -> None:
        target, _, attribute = ref.rpartition(":")
        if not target or not attribute.isidentifier():
            raise ConfigError(
                f"environment.name: openenv:{ref} names no server; expected "
                "openenv:http://HOST:PORT, openenv:module:app or openenv:path/server.py:app"
            )
        if target.endswith(".py"):
            path = Path(target).expanduser().resolve()
            if not path.is_file():
                raise ConfigError(f"environment.name: openenv:{ref}: {path} does not exist")
            app_dir, module = str(path.parent), path.stem
        else:
            app_dir, module = os.getcwd(), target
        with socket.socket() as probe:  # a free port; the server binds it a moment later
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.ref, self.url = ref, f"http://127.0.0.1:{port}"
        self._log = tempfile.NamedTemporaryFile(prefix="rlvr-openenv-", suffix=".log")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVE, app_dir, f"{module}:{attribute}", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        atexit.register(self.stop)
        self._wait(startup_s)

    def _wait(self, startup_s: float) -> None:
        deadline = time.monotonic() + startup_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                tail = self._last_line()
                self.stop()
                raise ConfigError(
                    f"environment.name: the OpenEnv server openenv:{self.ref} exited at start-up "
                    f"(status {code}): {tail}"
                )
            try:
                get_json(self.url + "/health", 1.0)
                return
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.1)
        self.stop()
        raise ConfigError(
            f"environment.name: the OpenEnv server openenv:{self.ref} did not answer within "
            f"{startup_s:g} s (environment.args startup_s)"
        )

    def _last_line(self) -> str:
        self._log.seek(0)
        lines = [ln.strip() for ln in self._log.read().decode(errors="replace").splitlines()]
        lines = [ln for ln in lines if ln]
        return lines[-1][:300] if lines else "no output"

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 2 s: a step still running would hold up
        uvicorn's graceful shutdown); idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(2)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


# The server's process: uvicorn, and a watch that ends it when the trainer is gone (a SIGKILL
# runs no atexit handler).
_SERVE = """
import os, sys, threading, time
parent = os.getppid()
def watch():
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
import uvicorn
app_dir, app, port = sys.argv[1:4]
uvicorn.run(app, host="127.0.0.1", port=int(port), app_dir=app_dir, log_level="warning")
"""


def get_json(url: str, timeout_s: float) -> Any:
    """The JSON of GET `url` (no proxy for a loopback address, as OpenEnv's client does)."""
    handlers = [urllib.request.ProxyHandler({})] if is_loopback(url) else []
    with urllib.request.build_opener(*handlers).open(url, timeout=timeout_s) as response:
        return json.loads(response.read())


def is_loopback(url: str) -> bool:
    """`url`'s host is this machine's loopback."""
    return urllib.parse.urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1")
