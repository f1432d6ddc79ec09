"""A verifiers (0.4, `verifiers.v1`) episode played in this process, rlvr sampling the model.

In verifiers an `Env.run(task, agents)` drives its agents: `agent.run(task)` (one segment: the
model answers the prompt) or `agent.interaction(task)` (the env is the user: each
`interaction.turn(message)` shows the model a user turn and returns its reply as a `Segment`).
An agent there is a harness program in a runtime box whose model calls go through an HTTP
interception server; here it is `Seat`, a stand-in with the same surface, whose model call is
a hand-off to rlvr: `Episode.model_turn` puts the messages the model is to see next on a queue
and waits for the text rlvr sampled (the adapter's `step`, in a rollout worker thread).

What verifiers decides stays verifiers' own code: the trace is a real `vf.Trace` built by
`graph.prepare_turn(...).commit(response)`, the turn limits (`AgentConfig.max_turns`) and the
task's `@vf.stop`s run through a real `RolloutSession` before and after every model turn,
scoring is `Task.score(trace)` (its weighted `@vf.reward`s and `@vf.metric`s) and the env's
`finalize(task, episode)`. What it does not do here: no runtime box (`Task.setup`, `finalize`
and scoring get `runtime=None`; signals that need one are skipped by verifiers), no tools, no
token counts (the `max_*_tokens` limits never fire; rlvr's `rollout.max_new_tokens` bounds
the row), one agent rollout per episode.

Every episode's coroutine runs on one event loop in a daemon thread per environment factory
(`EventLoopThread`), so a row the rollout abandons (cut off, timed out) leaves no loop behind:
its coroutine is cancelled when its environment is collected.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import queue
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

_SECOND_ROLLOUT = (
    "{env}.run() started a second agent rollout in one episode; rlvr trains one "
    "conversation per row (multi-agent, best-of-n and judge-agent envs are not supported)"
)


class EventLoopThread:
    """An asyncio event loop running in a daemon thread, started on first use."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self._loop.run_forever, name="rlvr-verifiers", daemon=True
                ).start()
            return self._loop

    def submit(self, coroutine: Any) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)


class Episode:
    """One row's episode: `env.run(task, agents)` on the shared loop, its model turns handed
    to the caller. `wait()` (any thread) gives the next event: ("turn", messages) when the
    model is to speak after `messages` (empty for the first turn, on the prompt), ("end",
    trace) when the episode finished (scored); the episode's exception raises there.
    `answer(text)` gives the pending turn the model's text."""

    def __init__(self, runner: EventLoopThread, env: Any, role: str, spec: Any, task: Any) -> None:
        self.runner, self.env, self.task = runner, env, task
        self.seat = Seat(self, role, spec)
        self._events: queue.Queue = queue.Queue()
        self._reply: asyncio.Future | None = None
        self.future = runner.submit(self._play())
        self.future.add_done_callback(lambda _: self._events.put(("end", None)))

    async def _play(self) -> Any:
        from verifiers.v1.episode import EnvInfo
        from verifiers.v1.episode import Episode as VfEpisode
        from verifiers.v1.trace import TraceTask

        agents = Agents({self.seat.name: self.seat})
        await self.env.setup(agents)
        await self.env.run(self.task, agents)
        trace = self.seat.trace
        if trace is None or trace.num_turns == 0:
            raise RuntimeError(f"{type(self.env).__name__}.run() ran no model turn")
        record = VfEpisode(
            env=EnvInfo(id=self.env.config.env_id),
            task=TraceTask(
                type=type(self.task).__name__,
                data=self.task.data,
                key=self.task.key,
                hash=self.task.hash,
            ),
            traces=[trace],
        )
        await self.env.finalize(self.task, record)  # cross-trace judgement, if any
        return trace

    async def model_turn(self, messages: list, conversation: list) -> str:
        """Hand the turn to the caller: the model speaks after `messages` (the new ones; the
        whole `conversation` is what verifiers would send); its text."""
        self._reply = asyncio.get_running_loop().create_future()
        self._events.put(("turn", (messages, conversation)))
        return await self._reply

    def answer(self, text: str) -> None:
        reply = self._reply
        if reply is None:
            raise RuntimeError("the verifiers episode is not waiting for a model turn")
        self._reply = None
        self.runner.loop.call_soon_threadsafe(reply.set_result, text)

    def wait(self, timeout: float | None = None) -> tuple[str, Any]:
        try:
            kind, value = self._events.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(
                f"the verifiers environment took more than {timeout:g} s to start its episode"
            ) from None
        if kind == "end":
            return kind, self.future.result()  # the episode's exception raises here
        return kind, value

    def cancel(self) -> None:
        self.future.cancel()  # thread-safe: cancels the coroutine on its loop


class Agents:
    """`vf.Agents`' surface: the env's agents by role name (`agents.player`)."""

    def __init__(self, seats: dict[str, Seat]) -> None:
        self._seats = seats

    def __getattr__(self, name: str) -> Seat:
        seats = self.__dict__.get("_seats") or {}
        if name not in seats:
            raise AttributeError(f"no agent {name!r}; this config declares {sorted(seats)}")
        return seats[name]


class Seat:
    """An agent of the env's one role, played by the policy rlvr trains: `run(task)` is one
    model turn on the task's prompt, `interaction(task)` an exchange the env drives turn by
    turn. One of them, once, per episode."""

    def __init__(self, episode: Episode, name: str, config: Any) -> None:
        self.episode, self.name, self.config = episode, name, config
        self.trainable = True  # an env's setup() may set it; one trainable seat is all rlvr has
        self.trace: Any = None

    def _rollout(self, task: Any, runtime: Any, on_trace: Callable | None) -> Rollout:
        if runtime is not None:
            raise NotImplementedError("rlvr plays verifiers agents without a runtime box")
        if self.trace is not None:
            raise RuntimeError(_SECOND_ROLLOUT.format(env=type(self.episode.env).__name__))
        rollout = Rollout(self.episode, task, self.name, self.config)
        self.trace = rollout.trace
        if on_trace is not None:
            on_trace(rollout.trace)
        return rollout

    async def run(
        self, task: Any, *, runtime: Any = None, on_trace: Callable | None = None, **_: Any
    ) -> Any:
        rollout = self._rollout(task, runtime, on_trace)
        await rollout.open()
        await rollout.turn(None)
        if rollout.ok:
            rollout.trace.stop("agent_completed")
        return await rollout.close()

    @asynccontextmanager
    async def interaction(
        self, task: Any, *, runtime: Any = None, on_trace: Callable | None = None, **_: Any
    ) -> AsyncIterator[Interaction]:
        rollout = self._rollout(task, runtime, on_trace)
        await rollout.open()
        interaction = Interaction(rollout)
        yield interaction  # an exception in the env's body fails the row: no scoring
        await interaction.close()


class Interaction:
    """`vf.Interaction`'s turn-by-turn surface (`turn`, `trace`, `close`), with its rules: a
    prompted task speaks first (a bare `turn()`), then each `turn(message)` is a user turn; a
    terminated segment ends the exchange."""

    def __init__(self, rollout: Rollout) -> None:
        self._rollout = rollout
        self._started = False
        self._over = False

    @property
    def trace(self) -> Any:
        return self._rollout.trace

    async def turn(self, message: Any = None) -> Any:
        if self._over:
            raise RuntimeError("the exchange is over (the run ended); read interaction.trace")
        prompted = not self._started and self.trace.task.data.prompt is not None
        if message is None and not prompted:
            raise ValueError(
                "nothing to run a turn on: a bare turn() takes a prompted task's opening "
                "reply; this exchange takes its next user message"
            )
        if message is not None and prompted:
            raise ValueError(
                "the task's prompt opens this exchange: take its first reply with a bare "
                "turn() before answering"
            )
        self._started = True
        segment = await self._rollout.turn(user_messages(message))
        self._over = segment.terminated
        return segment

    async def send(self, *_: Any, **__: Any) -> dict:
        raise NotImplementedError("rlvr drives verifiers interactions by turn() only")

    steer = send

    async def close(self) -> Any:
        if self._rollout.ok:
            self.trace.stop("user_closed")
        return await self._rollout.close()


def user_messages(message: Any) -> list | None:
    """A `turn()` argument as typed messages: a string is one user message, dicts are parsed
    as verifiers parses a chat request's."""
    if message is None:
        return None
    from verifiers.v1.dialects.chat import parse_message
    from verifiers.v1.types import UserMessage

    if isinstance(message, str):
        return [UserMessage(content=message)]
    return [parse_message(m) if isinstance(m, dict) else m for m in message]


class Rollout:
    """One agent rollout's trace, limits and stops, as `verifiers.v1.rollout.Rollout` keeps
    them, with the model call handed to the episode's caller."""

    def __init__(self, episode: Episode, task: Any, name: str, config: Any) -> None:
        from verifiers.v1.clients import ModelContext
        from verifiers.v1.configs.client import EvalClientConfig
        from verifiers.v1.session import RolloutLimits, RolloutSession, hook_boundary
        from verifiers.v1.state import state_cls
        from verifiers.v1.trace import AgentInfo, Trace, TraceTask
        from verifiers.v1.types import Request, Response

        self.episode, self.task = episode, task
        self.trace = Trace(
            task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            state=state_cls(type(task))(),
            agent=AgentInfo(config=config, name=name),
        )
        stops = [(hook_boundary(fn, allow_trace=True), fn) for fn in task.hooks("stop")]
        self.session = RolloutSession(
            ctx=ModelContext(model="rlvr-policy", client=EvalClientConfig()),
            trace=self.trace,
            trace_stops=[fn for where, fn in stops if where is Trace],
            request_stops=[fn for where, fn in stops if where is Request],
            response_stops=[fn for where, fn in stops if where is Response],
            limits=RolloutLimits(max_turns=config.max_turns),
        )
        self.closed = False

    @property
    def ok(self) -> bool:
        return self.trace.stop_condition is None

    async def open(self) -> None:
        await _call(self.task.setup, trace=self.trace, runtime=None)

    def prompt(self) -> list:
        """The task's opening messages, as verifiers' chat harness sends them: the system
        prompt (a message of its own), then the prompt."""
        from verifiers.v1.types import SystemMessage, UserMessage

        data = self.trace.task.data
        messages: list = [SystemMessage(content=data.system_prompt)] if data.system_prompt else []
        if isinstance(data.prompt, str):
            return [*messages, UserMessage(content=data.prompt)]
        return [*messages, *(data.prompt or [])]

    async def turn(self, messages: list | None) -> Any:
        """One model turn after `messages` (None: on the prompt): limits and stops first, the
        model's text committed to the trace, response stops after. A turn that is refused
        returns a terminated segment."""
        from verifiers.v1 import graph
        from verifiers.v1.agent import Segment
        from verifiers.v1.trace import ModelCall
        from verifiers.v1.types import AssistantMessage, Request, Response

        terminated = Segment(messages=[], terminated=True)
        if not self.ok or self.closed:
            return terminated
        conversation = self.prompt() if messages is None else [*self.trace.messages, *messages]
        if await self.session.refused() is not None:  # limits (max_turns), trace @stops
            return terminated
        request, _, stopped = await self.session.rewrite_request(Request(messages=conversation))
        pending = graph.prepare_turn(self.trace, request.messages)
        if stopped is not None:  # a request @stop: the input is recorded, no model call
            pending.commit_prompt()
            self.trace.stop(stopped)
            return terminated
        started = time.time()
        text = await self.episode.model_turn(list(messages or []), list(request.messages))
        response = Response(
            id=uuid.uuid4().hex,
            created=int(started),
            model="rlvr-policy",
            message=AssistantMessage(content=text),
            finish_reason="stop",
        )
        _, _, stopped = await self.session.rewrite_response(response)
        node = pending.commit(response)
        self.trace.calls.append(ModelCall(node=node, model="rlvr-policy", finish_reason="stop"))
        if stopped is not None:  # the reply stands; the exchange ends with it
            self.trace.stop(stopped)
        return Segment(messages=[response.message])

    async def close(self) -> Any:
        """Task finalize and scoring (`Task.score`: metrics, weighted rewards, judges), as
        verifiers closes a rollout; the trace."""
        if self.closed:
            return self.trace
        self.closed = True
        await _call(self.task.finalize, trace=self.trace, runtime=None)
        await self.task.score(self.trace, None)
        self.trace.is_completed = True
        self.trace.ok = True
        return self.trace


async def _call(hook: Callable, **available: Any) -> None:
    """A task hook called with the arguments it names (verifiers' `invoke`), awaited."""
    names = inspect.signature(hook).parameters
    result = hook(**{k: v for k, v in available.items() if k in names})
    if inspect.isawaitable(result):
        await result
