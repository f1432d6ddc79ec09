"""OpenEnv environments (openenv-core, the `openenv` extra) as rlvr environments.

    environment.name=openenv:http://HOST:PORT          a running OpenEnv server
    environment.name=openenv:module.path:app           an OpenEnv app (what `create_app` returns)
    environment.name=openenv:path/to/server.py:app     served here for the run: uvicorn in a
                                                       subprocess on 127.0.0.1, a free port,
                                                       stopped at exit

Each rollout row is one OpenEnv session: the WebSocket `/ws` that OpenEnv's `EnvClient` opens,
with the messages it sends (`reset` with keyword arguments, `step` with the action, `close`),
spoken here with the `websockets` library openenv-core depends on, all sessions on one event
loop in one daemon thread. The trainer never imports openenv itself: its import pulls in gradio
(about 5 s). `reset(sample)` opens the session and resets it with the sample's fields as
keyword arguments (the server passes those its environment's `reset` accepts); the model's
turn text fills the action's text field; the observation's text field is what the model sees
next; the server's reward and done come back as they are, and the observation's numeric fields
as `env/<name>` metrics. The session closes when the server says done, after the last turn
`environment.max_turns` allows, after a failure, or else when the row's environment object is
dropped (at the end of the rollout call). docs/environments/openenv.md has the whole mapping.

Time-outs: every request (connect, reset, step) is bounded by `environment.timeout_s`. A step
that overruns ends its row as a tool timeout with reward 0; a session the server closes or
cannot open fails its row (reward 0, a line of errors.jsonl). After a connection that failed,
the next ones fail at once for `environment.timeout_s` seconds, so a dead server costs a
rollout about one time-out, not one per row, and the run goes on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rlvr.environments.adapters.openenv_server import LocalServer, get_json, is_loopback
from rlvr.environments.base import Environment, StepResult
from rlvr.errors import ConfigError

SETTINGS = ("action_field", "observation_field", "role", "stop", "metrics", "startup_s")
_COMMON_FIELDS = {"done", "reward", "metadata"}  # every OpenEnv action/observation has them
_MAX_MESSAGE_BYTES = 100 * 2**20  # EnvClient's default: observations can be large
_CLOSE_TIMEOUT_S = 1.0  # a closing handshake the server does not answer


@dataclass(frozen=True)
class FieldMap:
    """How a session's messages map to rlvr's: the action's text field, the observation's
    (None: the observation has no text, so every step ends its row), the role an observation
    is shown in (None: plain text), whether numeric observation fields become metrics, and
    environment.max_turns (the session closes after that many steps: the row cannot go on)."""

    action_field: str
    observation_field: str | None
    role: str | None
    metrics: bool
    max_turns: int


def factory(ref: str, env: Any, settings: dict[str, Any]) -> Callable[[], Environment]:
    """The function making one OpenEnv session per rollout row, for `ref` (a server's URL or
    an app to serve, module docstring); the server's health and schema are checked here, so a
    server that does not answer is a ConfigError before any weights load."""
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ConfigError(
            f"environment.args: {unknown[0]!r} is no openenv setting; expected "
            f"{', '.join(SETTINGS)} (docs/environments/openenv.md)"
        )
    stop = _strings(settings.get("stop", []), "stop")
    startup_s = settings.get("startup_s", 60.0)
    if isinstance(startup_s, bool) or not isinstance(startup_s, (int, float)) or startup_s <= 0:
        raise ConfigError(f"environment.args: startup_s={startup_s!r}; expected seconds > 0")
    role = settings.get("role")
    if role is not None and (not isinstance(role, str) or not role):
        raise ConfigError(f"environment.args: role={role!r}; expected a chat role like tool")
    metrics = settings.get("metrics", True)
    if not isinstance(metrics, bool):
        raise ConfigError(f"environment.args: metrics={metrics!r}; expected true or false")

    server = None
    if ref.startswith(("http://", "https://")):
        url = ref.rstrip("/")
    else:
        server = LocalServer(ref, float(startup_s))
        url = server.url
    try:
        fields = _fields(url, env, settings, role, metrics)
    except BaseException:
        if server is not None:
            server.stop()
        raise
    sessions = Sessions(url, float(env.timeout_s))

    def make() -> OpenEnvSession:
        return OpenEnvSession(sessions, fields)

    make.stop = stop  # type: ignore[attr-defined]
    make.url = url  # type: ignore[attr-defined]
    make.server = server  # type: ignore[attr-defined]
    return make


def _fields(
    url: str, env: Any, settings: dict[str, Any], role: str | None, metrics: bool
) -> FieldMap:
    """The server's health checked and its schema read into a FieldMap."""
    timeout_s = float(env.timeout_s)
    _answer(url, "/health", timeout_s)
    schema = _answer(url, "/schema", timeout_s)
    if not all(isinstance(schema.get(k), dict) for k in ("action", "observation")):
        raise ConfigError(
            f"environment.name: {url}/schema is not an OpenEnv server's (no action and "
            f"observation schemas)"
        )
    action_field = _text_field(schema["action"], "action", settings.get("action_field"), url)
    if action_field is None:
        raise ConfigError(
            f"environment.name: the action of {url} has no string field for the model's turn"
        )
    others = [f for f in schema["action"].get("required", []) if f != action_field]
    if others:
        raise ConfigError(
            f"environment.name: the action of {url} requires {', '.join(others)} besides "
            f"{action_field}; rlvr fills one text field with the model's turn"
        )
    observation_field = _text_field(
        schema["observation"], "observation", settings.get("observation_field"), url
    )
    return FieldMap(action_field, observation_field, role, metrics, env.max_turns)


class OpenEnvSession:
    """One rollout row's OpenEnv session, behind rlvr's Environment protocol."""

    def __init__(self, sessions: Sessions, fields: FieldMap) -> None:
        self._sessions, self._fields = sessions, fields
        self._ws: Any = None
        self._closer: weakref.finalize | None = None
        self._steps = 0

    def reset(self, sample: Mapping[str, Any]) -> str | None:
        self._ws = ws = self._sessions.open()
        self._closer = weakref.finalize(self, self._sessions.close_later, ws)
        self._closer.atexit = False
        try:
            data = self._sessions.request(ws, "reset", _keyword_arguments(sample))
        except (TimeoutError, ConnectionError) as e:
            self._close()
            self._sessions.mark_down(str(e))  # resets run one after another: fail the rest fast
            raise
        except BaseException:
            self._close()
            raise
        if data.get("done"):
            self._close()  # over before it began: the first turn is the only one
        return self._text(data)

    def step(self, text: str) -> StepResult:
        if self._ws is None:
            return StepResult(done=True)
        started = time.monotonic()
        try:
            data = self._sessions.request(self._ws, "step", {self._fields.action_field: text})
        except TimeoutError:
            self._close()
            return StepResult(
                reward=0.0,  # the episode never finished: its transcript earns nothing
                done=True,
                tool_call=True,
                tool_error=True,
                tool_timeout=True,
                tool_seconds=time.monotonic() - started,
            )
        except BaseException:
            self._close()
            raise
        self._steps += 1
        done = bool(data.get("done"))
        if done or self._steps >= self._fields.max_turns:
            self._close()
        return StepResult(
            observation=self._text(data),
            reward=data.get("reward"),  # checked by the rollout: None or a finite number
            done=done,
            role=self._fields.role,
            metrics=self._metrics(data) if self._fields.metrics else None,
        )

    def _close(self) -> None:
        if self._closer is not None:
            self._closer()  # runs once: the finalizer is spent after this
        self._ws = None

    def _text(self, data: Mapping[str, Any]) -> str | None:
        field = self._fields.observation_field
        observation = data.get("observation")
        value = observation.get(field) if field and isinstance(observation, dict) else None
        return value if value is None or isinstance(value, str) else str(value)

    def _metrics(self, data: Mapping[str, Any]) -> dict[str, float] | None:
        observation = data.get("observation")
        if not isinstance(observation, dict):
            return None
        found = {}
        for name, value in observation.items():
            if name != self._fields.observation_field and isinstance(value, (int, float)):
                number = float(value) if abs(value) < 2**1023 else math.inf  # a huge int too
                if math.isfinite(number):
                    found[name] = number
        return found or None


class Sessions:
    """The WebSockets of one server's sessions, on one event loop in a daemon thread (one
    thread however many rows are open); every request bounded by `timeout_s`."""

    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urllib.parse.urlsplit(url)
        scheme = "wss" if parts.scheme == "https" else "ws"
        self.url, self.timeout_s = url, timeout_s
        self.ws_url = urllib.parse.urlunsplit((scheme, parts.netloc, parts.path + "/ws", "", ""))
        # as EnvClient: no proxy for loopback, the environment's (HTTPS_PROXY...) otherwise
        self._proxy: Literal[True] | None = None if is_loopback(url) else True
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="rlvr-openenv", daemon=True).start()
        self._lock = threading.Lock()
        self._down: tuple[float, str] | None = None  # (when, why) the last connection failed

    def open(self) -> Any:
        """A new session's WebSocket; ConnectionError when the server cannot be reached (at
        once, without trying, within timeout_s of the last connection that failed)."""
        from websockets.asyncio.client import connect

        with self._lock:
            down = self._down
        if down is not None and time.monotonic() - down[0] < self.timeout_s:
            raise ConnectionError(f"{down[1]} (not retried within environment.timeout_s)")

        async def opened() -> Any:
            return await connect(
                self.ws_url,
                open_timeout=None,  # the whole request is bounded in `_run`
                close_timeout=_CLOSE_TIMEOUT_S,
                max_size=_MAX_MESSAGE_BYTES,
                proxy=self._proxy,
            )

        try:
            ws = self._run(opened(), "connect")
        except Exception as e:
            why = f"the OpenEnv server at {self.url} did not open a session: {_error(e)}"
            self.mark_down(why)
            raise ConnectionError(why) from e
        with self._lock:
            self._down = None
        return ws

    def mark_down(self, why: str) -> None:
        """Fail the sessions opened within timeout_s from now at once, with `why`."""
        with self._lock:
            self._down = (time.monotonic(), why)

    def request(self, ws: Any, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        """The `data` of the server's observation reply to a `kind` message ("reset", "step");
        TimeoutError past timeout_s, ConnectionError when the session was closed, RuntimeError
        for the server's error reply."""
        from websockets.exceptions import ConnectionClosed

        async def exchanged() -> Any:
            try:
                await ws.send(json.dumps({"type": kind, "data": data}))
            except ConnectionClosed:
                pass  # a server refusing the session says why, then closes: read it
            return json.loads(await ws.recv())

        try:
            reply = self._run(exchanged(), kind)
        except ConnectionClosed as e:
            raise ConnectionError(
                f"the OpenEnv server at {self.url} closed the session during {kind}: {_error(e)}"
            ) from e
        if not isinstance(reply, dict):
            raise RuntimeError(f"the OpenEnv server at {self.url} replied {reply!r} to {kind}")
        if reply.get("type") == "error":
            error = reply.get("data")
            error = error if isinstance(error, dict) else {}
            hint = ""
            if error.get("code") == "CAPACITY_REACHED":
                hint = (
                    "; every rollout row holds a session: raise the server's "
                    "max_concurrent_envs (create_app) to the rows of a step and of an evaluation"
                )
            raise RuntimeError(
                f"the OpenEnv server at {self.url} answered {kind} with an error: "
                f"{error.get('message')} (code {error.get('code')}){hint}"
            )
        if reply.get("type") != "observation" or not isinstance(reply.get("data"), dict):
            raise RuntimeError(
                f"the OpenEnv server at {self.url} replied {kind} with a message of type "
                f"{reply.get('type')!r}, not an observation"
            )
        return reply["data"]

    def close_later(self, ws: Any) -> None:
        """Close a session in the background (never blocks: a hung server's closing handshake
        takes its close time-out on the event loop, not in the rollout)."""

        async def closed() -> None:
            try:  # the server ends the session and closes the socket itself (EnvClient's way)
                await asyncio.wait_for(ws.send(json.dumps({"type": "close"})), _CLOSE_TIMEOUT_S)
                await asyncio.wait_for(ws.wait_closed(), _CLOSE_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - best effort: the server may be gone
                pass
            try:
                await ws.close()  # a no-op once the server closed it
            except Exception:  # noqa: BLE001
                pass

        try:
            asyncio.run_coroutine_threadsafe(closed(), self._loop)
        except RuntimeError:  # the loop is closed: the process is ending
            pass

    def _run(self, coroutine: Coroutine[Any, Any, Any], kind: str) -> Any:
        """The result of `coroutine` run on the sessions' loop; TimeoutError after timeout_s."""
        bounded = asyncio.wait_for(coroutine, self.timeout_s)
        future = asyncio.run_coroutine_threadsafe(bounded, self._loop)
        try:
            return future.result(self.timeout_s + 0.5)  # + 0.5: the loop's own deadline first
        except (asyncio.TimeoutError, concurrent.futures.TimeoutError, TimeoutError) as e:
            future.cancel()  # (3.10: three classes; 3.11 on: one)
            raise TimeoutError(
                f"the OpenEnv server at {self.url} did not answer {kind} within "
                f"{self.timeout_s:g} s (environment.timeout_s)"
            ) from e


def _answer(url: str, path: str, timeout_s: float) -> dict[str, Any]:
    """The JSON object the server answers GET `path` with; a ConfigError when it does not."""
    try:
        answer = get_json(url + path, timeout_s)
    except Exception as e:
        raise ConfigError(
            f"environment.name: no OpenEnv server answered GET {url}{path}: {_error(e)}; start "
            f"it first, or name its app as openenv:module:app to have rlvr start it"
        ) from e
    if not isinstance(answer, dict):
        raise ConfigError(f"environment.name: {url}{path} answered {answer!r}, not an object")
    return answer


def _text_field(schema: dict, kind: str, chosen: Any, url: str) -> str | None:
    """The string field of an action or observation JSON schema: `chosen` (checked), else the
    only one there is (None for an observation without one)."""
    fields = {
        name: spec
        for name, spec in (schema.get("properties") or {}).items()
        if name not in _COMMON_FIELDS
    }
    if chosen is not None:
        if not isinstance(chosen, str) or chosen not in fields:
            raise ConfigError(
                f"environment.args: {kind}_field={chosen!r} is no field of the {kind} of {url} "
                f"({', '.join(fields) or 'none'})"
            )
        return chosen
    texts = [name for name, spec in fields.items() if _is_string(spec)]
    if len(texts) == 1:
        return texts[0]
    if not texts and kind == "observation":
        return None
    raise ConfigError(
        f"environment.args: the {kind} of {url} has {len(texts) or 'no'} string fields"
        f"{' (' + ', '.join(texts) + ')' if texts else ''}; name the one for the model's text "
        f"with {kind}_field=NAME"
    )


def _is_string(spec: Any) -> bool:
    """A JSON-schema property that is a string (or an optional one)."""
    if not isinstance(spec, dict):
        return False
    options = [spec, *spec.get("anyOf", [])]
    return any(isinstance(o, dict) and o.get("type") == "string" for o in options)


def _keyword_arguments(sample: Mapping[str, Any]) -> dict[str, Any]:
    """The sample's fields that JSON can carry: reset's keyword arguments."""
    out = {}
    for name, value in sample.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[str(name)] = value
    return out


def _strings(value: Any, name: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
        raise ConfigError(f"environment.args: {name}={value!r}; expected a list of strings")
    return tuple(items)


def _error(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())[:300]
