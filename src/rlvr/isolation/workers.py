"""A child process serving verifier calls, killed and replaced when a call overruns its limit.

Why processes, and why kill them: a verifier runs code the policy wrote or sympy on answers the
policy chose (`5^{5^{5^{5^5}}}`), and both can run for hours inside one C call. Signal-based
timeouts cannot interrupt a C call and do not work off the main thread; the only bound that always
holds is to SIGKILL the process doing the work from outside and start a fresh one.

`WorkerProcess`: one child process that serves calls of one handler; `call(payload, timeout_s)`
returns the result or raises `WorkerTimeout` / `WorkerCrashed` after killing and replacing it.
The math verifier isolates its checks in one; `VerifierPool` (pool.py) scores a batch in N.

Start method: "forkserver" where the platform has it, else "spawn"; never "fork". The trainer
process holds torch's thread pools (and maybe CUDA), and forking a multi-threaded process can
deadlock the child on a lock some other thread held at fork time. The fork server is a fresh,
single-threaded interpreter that preloads sympy and math-verify once, so replacing a killed worker
costs a fork (tens of ms), not a fresh import of sympy (a second or more). As with any
spawn/forkserver use, a script that creates workers needs the `if __name__ == "__main__":` guard.

Children are not daemonic (a verifier may start processes of its own); they die with their
parent anyway: a Linux parent-death signal, EOF on their pipe when idle, and an atexit hook.

This module imports nothing from rlvr but `errors`: handlers are named by 'module:function'
strings and imported in the child.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing
import os
import signal
import sys
import traceback
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from rlvr.errors import UserError

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext, SpawnContext

START_TIMEOUT_S = 120.0  # a worker that is not ready after this long is a bug (or a dead machine)
DETAIL_MAX_CHARS = 200
_PRELOAD = ["rlvr.rewards.registry", "rlvr.rewards.math", "math_verify", "sympy"]


class WorkerTimeout(Exception):
    """The call ran past its limit; the worker was killed and replaced."""


class WorkerCrashed(Exception):
    """The worker died during the call (segfault, os._exit, OOM kill); it was replaced."""


class WorkerError(Exception):
    """The handler raised; the message is 'ExceptionType: message' from the worker, and
    `traceback` the worker's formatted traceback (None when it sent none)."""

    def __init__(self, message: str, traceback: str | None = None) -> None:
        super().__init__(message)
        self.traceback = traceback


class WorkerSetupError(Exception):
    """The worker could not build its handler (bad spec, import error); message from the worker."""


def mp_context() -> ForkServerContext | SpawnContext:
    """The multiprocessing context for verifier workers: forkserver (with preloads) or spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        # Only takes effect if the fork server is not running yet; a module that fails to
        # import (math-verify not installed) is skipped silently by the fork server.
        ctx.set_forkserver_preload(["__main__", *_PRELOAD])
        return ctx
    return multiprocessing.get_context("spawn")


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        pass


def _load_callable(target: str) -> Callable[..., Any]:
    module_name, name = target.rsplit(":", 1)
    return getattr(importlib.import_module(module_name), name)


def short_error(e: BaseException) -> str:
    """'ExceptionType: message', cut to DETAIL_MAX_CHARS."""
    return f"{type(e).__name__}: {e}"[:DETAIL_MAX_CHARS]


def _worker_main(conn: Connection, factory: str, arg: Any) -> None:
    """Child process: build the handler with `factory(arg)`, then serve payloads until EOF."""
    _die_with_parent()
    # Our own process group, so a kill also reaches processes the verifier started; Ctrl-C
    # then goes to the parent only, which kills us.
    if hasattr(os, "setpgrp"):  # POSIX
        os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A verifier that prints must not corrupt the parent's stdout (`rlvr verify` writes JSONL
    # there): the child's stdout goes to stderr.
    try:
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    except OSError:  # pragma: no cover - no stderr
        pass
    try:
        handler = _load_callable(factory)(arg)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        # A UserError's message is the whole story; anything else needs its type.
        conn.send(("setup_error", str(e) if isinstance(e, UserError) else short_error(e)))
        return
    conn.send(("ready", None))
    while True:
        try:
            payload = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send(("ok", handler(payload)))
        except BaseException as e:  # noqa: BLE001 - any verifier bug is reported, not fatal
            conn.send(("error", (short_error(e), traceback.format_exc())))


class WorkerProcess:
    """One child process serving `factory(arg)(payload)` calls, replaced when killed or dead.

    `factory` is a 'module:function' path imported in the child, so neither the handler nor
    what it closes over needs to be picklable; `arg` and payloads must be.
    """

    def __init__(self, factory: str, arg: Any = None, ctx: Any = None) -> None:
        self.factory, self.arg = factory, arg
        self.ctx = ctx or mp_context()
        self.process: Any = None
        self.conn: Connection | None = None
        self.ready = False
        _LIVE.add(self)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the child without waiting for it to be ready."""
        parent_conn, child_conn = self.ctx.Pipe(duplex=True)
        self.process = self.ctx.Process(
            target=_worker_main, args=(child_conn, self.factory, self.arg), name="rlvr-verifier"
        )
        self.process.start()
        child_conn.close()
        self.conn, self.ready = parent_conn, False

    def handle_ready_message(self) -> None:
        """Read the child's first message; raises WorkerSetupError / WorkerCrashed."""
        try:
            kind, message = self.conn.recv()  # type: ignore[union-attr]
        except (EOFError, OSError):
            code = self._reap()
            raise WorkerCrashed(f"worker exited during start-up (exit code {code})") from None
        if kind != "ready":
            self.kill()
            raise WorkerSetupError(message)
        self.ready = True

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        if self.process is None:
            self.start()
        if self.ready:
            return
        if not self.conn.poll(timeout_s):  # type: ignore[union-attr]
            self.kill()
            raise WorkerCrashed(f"worker not ready after {timeout_s:.0f} s")
        self.handle_ready_message()

    def kill(self) -> None:
        """SIGKILL the child and its process group (C calls cannot ignore it); free the pipe."""
        if self.process is not None:
            if self.process.is_alive():
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except (OSError, AttributeError):  # not yet a group leader; or not POSIX
                    self.process.kill()
            self.process.join(5)
            if self.process.exitcode is not None:
                self.process.close()
        if self.conn is not None:
            self.conn.close()
        self.process, self.conn, self.ready = None, None, False

    def restart(self) -> None:
        self.kill()
        self.start()

    def _reap(self) -> int | None:
        code = None
        if self.process is not None:
            self.process.join(5)
            code = self.process.exitcode
        self.kill()
        return code

    # -- calls -----------------------------------------------------------------------------------
    def send(self, payload: Any) -> None:
        self.conn.send(payload)  # type: ignore[union-attr]

    def receive(self) -> Any:
        """The reply to the last payload; raises WorkerError or WorkerCrashed (and restarts)."""
        try:
            kind, value = self.conn.recv()  # type: ignore[union-attr]
        except (EOFError, OSError):
            code = self._reap()
            self.start()
            raise WorkerCrashed(f"worker crashed (exit code {code})") from None
        if kind == "error":
            message, trace = value if isinstance(value, tuple) else (value, None)
            raise WorkerError(message, trace)
        return value

    def call(self, payload: Any, timeout_s: float) -> Any:
        """Run one call with a wall-clock limit measured from when a ready worker gets it."""
        self.wait_ready()
        try:
            self.send(payload)
        except (BrokenPipeError, OSError):  # died while idle: not this payload's fault, retry once
            self.restart()
            self.wait_ready()
            self.send(payload)
        if not self.conn.poll(timeout_s):  # type: ignore[union-attr]
            self.restart()
            raise WorkerTimeout(f"timeout after {timeout_s:g} s")
        return self.receive()

    def close(self) -> None:
        self.kill()
        _LIVE.discard(self)


# Workers alive in this process, killed at interpreter exit before multiprocessing's own atexit
# hook would join (and wait for) a stuck non-daemonic child.
_LIVE: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()


@atexit.register
def _kill_live_workers() -> None:
    for worker in list(_LIVE):
        worker.kill()
