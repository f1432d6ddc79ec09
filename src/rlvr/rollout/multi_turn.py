"""Multi-turn rollouts: an engine that runs an environment loop around another engine.

For each row (G per prompt) the loop is

    context = prompt (+ the environment's reset observation, if any)
    repeat up to max_turns times:
        turn = engine.generate(context)          stops at EOS, a stop string of the tool-call
                                                 format, or the row's remaining token budget
        result = env.step(text of the turn)      in a thread pool, every row at once
        if the row is done: stop
        context += turn + tokens(result.observation)

and the row's completion is every turn's sampled tokens and every observation's tokens, in the
order the model saw them. Token-exact by construction: the sampled tokens are kept as sampled,
and an observation is tokenized on its own (plain text) or as the *difference* its chat
message makes to a fixed two-message conversation (chat roles), so the transcript is never
re-rendered or re-tokenized: a chat template that rewrites earlier turns (dropping old
`<think>` blocks, say) cannot change what is trained. `loss_masks` mark the sampled tokens
(1) and the inserted ones (0); inserted tokens get log-prob 0 and never reach the loss, the KL
or a length normaliser.

The whole completion, observations included, fits in `rollout.max_new_tokens`; a row that
wants another turn when the turn limit or the budget is reached ends as truncated ("length").
Each turn is one call of the inner engine over every row still going, so continuous batching
works within a turn; a later turn prefills its row's whole context again (no KV cache is
carried between turns). One draw from the caller's generator seeds every turn of a call, so a
rollout is reproducible and every rank of a torchrun job draws the same number of seeds.

A failing environment fails its row, under the policy of failing verifiers
(rlvr.rewards.base): its constructor or `reset` raising, `reset` returning anything but a
string or None, `step` raising (in its thread), or `step` returning anything but a
`StepResult` whose reward is None or a finite number (`checked_step`). The row ends (a failed
reset still has its first model turn, never stepped), its reward is 0 whatever the verifier
says (the transcript is incomplete), and its `ToolRecord.failure` carries the record, traceback
included, out of the rollout; a failed step also counts as a failed tool call. A step abandoned
at its time limit stays a tool timeout, no failure. A ConfigError (a sandbox that cannot start) or
KeyboardInterrupt stops the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import torch

from rlvr.config import EnvironmentConfig
from rlvr.environments import Environment, StepResult, environment_from_config
from rlvr.errors import ConfigError
from rlvr.rewards.base import (
    Failure,
    checked_reward,
    contained,
    failure_of,
    first_tracebacks,
    return_error,
    sample_id,
    stops_the_run,
)
from rlvr.rollout.sampling import sampling_seed
from rlvr.rollout.types import (
    Engine,
    Prompts,
    RolloutBatch,
    SamplingParams,
    ToolRecord,
    WeightFeed,
)

_GRACE_S = 1.0  # on top of environment.timeout_s before a step is abandoned
_POLL_S = 0.02


@dataclass
class _Row:
    context: list[int]  # prompt (+ reset observation) + completion so far: the next turn's input
    prompt_len: int
    env: Environment | None  # None: it failed to start
    where: tuple[int, Any]  # (row, sample id) a failure of the row is recorded with
    tokens: list[torch.Tensor] = field(default_factory=list)
    parts: list[tuple[str, str]] = field(default_factory=list)  # (who, text) in order
    masks: list[torch.Tensor] = field(default_factory=list)
    logprobs: list[torch.Tensor] = field(default_factory=list)
    versions: list[torch.Tensor] = field(default_factory=list)  # partial rollouts only
    finish: str = "length"
    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    seconds: float = 0.0
    turns: int = 0
    reward: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # the environment's own figures
    failure: Failure | None = None  # the environment failed: the row ends, reward 0

    def fail(self, failure: Failure | None) -> None:
        if failure is not None and self.failure is None:
            self.failure = replace(failure, row=self.where[0], sample_id=self.where[1])

    @property
    def used(self) -> int:
        return len(self.context) - self.prompt_len

    def add(
        self, ids: torch.Tensor, logprobs: torch.Tensor | None, versions: torch.Tensor | None
    ) -> None:
        """Append a turn's sampled tokens (`logprobs` given) or an observation's (None);
        `versions`: each token's policy version (partial rollouts), else None."""
        if versions is not None:
            self.versions.append(versions)
        self.tokens.append(ids)
        self.masks.append(torch.full((ids.numel(),), float(logprobs is not None)))
        self.logprobs.append(logprobs if logprobs is not None else torch.zeros(ids.numel()))
        self.context.extend(ids.tolist())


class MultiTurnEngine:
    """`generate` as every engine has it, with an environment per row between model turns.

    engine: the inner engine (fast, hf, vllm); the rest of the Engine protocol (max_batch_size,
        exact_logprobs, sync, load_weights, release_cache) are the inner engine's.
    make_env: a function making one environment (rlvr.environments.environment_factory).
    max_turns: model turns per row (>= 1); stop: the tool-call format's stop strings, added to
        the sampling's own; timeout_s: a step running longer (plus a grace second) is
        abandoned and ends its row as a tool timeout; workers: steps run at once.
    """

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        make_env: Callable[[], Environment],
        *,
        max_turns: int,
        stop: Sequence[str] = (),
        timeout_s: float = 5.0,
        workers: int = 4,
    ) -> None:
        if max_turns < 1 or workers < 1:
            raise ValueError(f"MultiTurnEngine: max_turns {max_turns}, workers {workers}: >= 1")
        self.engine, self.tokenizer, self.make_env = engine, tokenizer, make_env
        self.max_turns, self.stop = max_turns, tuple(stop)
        self.timeout_s, self.workers = timeout_s, workers

    # The rest of the Engine protocol is the inner engine's.
    @property
    def exact_logprobs(self) -> bool:
        return self.engine.exact_logprobs

    @property
    def max_batch_size(self) -> int:
        return self.engine.max_batch_size

    @max_batch_size.setter
    def max_batch_size(self, value: int) -> None:  # the OOM back-off halves the inner batch
        self.engine.max_batch_size = value

    def sync(self, model: torch.nn.Module) -> None:
        self.engine.sync(model)

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        self.engine.load_weights(state_dict)

    def release_cache(self) -> None:
        self.engine.release_cache()

    def close(self) -> None:
        close = getattr(self.engine, "close", None)  # vLLM's engine holds a process
        if close is not None:
            close()

    def generate(
        self,
        prompts: Prompts,
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator | None = None,
        first_row: int = 0,
        samples: Sequence[Mapping[str, Any]] | None = None,
        feed: WeightFeed | None = None,
    ) -> RolloutBatch:
        """`n` multi-turn completions of each prompt; `samples[i]` (the sample prompt i came
        from) is what each of its rows' environments is reset with (empty when not given).
        `feed` (partial rollouts): polled before each turn and passed to the inner engine,
        which may take newer weights within a turn too; an observation's tokens carry the
        version current when it is inserted."""
        prompt_lists = [torch.as_tensor(p).reshape(-1).tolist() for p in prompts]
        base_seed = sampling_seed(generator) if generator is not None else None
        rows: list[_Row] = []
        for i, prompt in enumerate(prompt_lists):
            sample = samples[i] if samples is not None else {}
            for _ in range(n):
                started, failure = contained(partial(self._start, sample), "environment")
                env, first = started if started is not None else (None, None)
                context = prompt + (self._observation_ids(first, None, "eos") if first else [])
                # (a reset observation is context, appended to the row's prompt as plain text)
                # located as the caller numbers rows (first_row on) and prompts (first_row // n on)
                where = (first_row + len(rows), sample_id(sample, first_row // n + i))
                rows.append(_Row(context, len(context), env, where))
                rows[-1].fail(failure)
        shared_prompts = all(r.prompt_len == len(prompt_lists[i // n]) for i, r in enumerate(rows))
        budget = sampling.max_new_tokens
        params = replace(sampling, stop=tuple(sampling.stop) + self.stop)
        active = list(range(len(rows)))
        # engines without partial rollouts (a user's, a test's) need not take `feed`
        fed: dict[str, Any] = {"feed": feed} if feed is not None else {}
        for turn in range(self.max_turns):
            if not active:
                break
            if feed is not None:
                feed.poll()  # a turn boundary is a token boundary too
            room = max(budget - rows[r].used for r in active)
            gen = _turn_generator(generator, base_seed, turn)
            turn_params = replace(params, max_new_tokens=room)
            if turn == 0 and shared_prompts:  # each prompt shared by its rows, as single-turn
                out = self.engine.generate(prompt_lists, n, turn_params, gen, first_row, **fed)
            else:
                contexts = [rows[r].context for r in active]
                out = self.engine.generate(contexts, 1, turn_params, gen, first_row, **fed)
            stepping: list[tuple[int, Environment, str]] = []
            for j, r in enumerate(active):
                row = rows[r]
                row.turns += 1
                ids, lp = out.completion_ids[j], out.logprobs[j]
                versions = None
                if feed is not None:  # the inner engine's, or the version it ran on
                    versions = (
                        out.versions[j]
                        if out.versions is not None
                        else torch.full((ids.numel(),), feed.version, dtype=torch.long)
                    )
                left = budget - row.used
                reason, text = out.finish_reason[j], out.completion_text[j]
                if ids.numel() > left:  # the shared call ran past this row's own budget
                    ids, lp, reason = ids[:left], lp[:left], "length"
                    versions = versions[:left] if versions is not None else None
                if ids.numel() < out.completion_ids[j].numel():
                    text = self.tokenizer.decode(ids, skip_special_tokens=True)
                row.add(ids, lp, versions)
                row.parts.append(("model", text))
                row.finish = reason
                # (a row without an environment failed to start: it has a failure)
                if reason != "length" and row.failure is None and row.env is not None:
                    stepping.append((r, row.env, text))
            results = self._step_all([(env, text) for _, env, text in stepping])
            active = []
            for (r, _, _), (result, failure) in zip(stepping, results):
                row = rows[r]
                row.fail(failure)
                row.calls += result.tool_call
                row.errors += result.tool_error
                row.timeouts += result.tool_timeout
                row.seconds += result.tool_seconds
                if result.reward is not None:
                    row.reward = float(result.reward)
                if result.metrics:
                    row.metrics.update(result.metrics)
                if result.done or result.observation is None:
                    continue
                obs = self._observation_ids(result.observation, result, row.finish)
                if turn + 1 >= self.max_turns or row.used + len(obs) >= budget:
                    row.finish = "length"  # wanted another turn: cut off
                    continue
                observed = None
                if feed is not None:
                    observed = torch.full((len(obs),), feed.version, dtype=torch.long)
                row.add(torch.tensor(obs, dtype=torch.long), None, observed)
                row.parts.append(("env", result.observation))
                active.append(r)
        return self._batch(rows, len(prompt_lists), n, versions=feed is not None)

    def _start(self, sample: Mapping[str, Any]) -> tuple[Environment, str | None]:
        """A fresh environment for one row, and its reset observation (checked: str or None)."""
        env = self.make_env()
        first = env.reset(sample)
        if first is not None and not isinstance(first, str):
            raise return_error(first, "the environment's reset", "a string or None")
        return env, first

    def _step_all(
        self, work: list[tuple[Environment, str]]
    ) -> list[tuple[StepResult, Failure | None]]:
        """(env.step(text), None) of every row, at most `workers` at once, each in a daemon
        thread of its own. A step that fails (raises, or returns what `checked_step` refuses)
        gives a failed tool call that ends the row, and its Failure; a ConfigError (the sandbox
        cannot start) or KeyboardInterrupt stops the run. A step running past timeout_s + a
        grace second is abandoned as a tool timeout (no failure): its slot goes to the next
        step at once, and its thread, being a daemon, never holds up the rollout or the
        process's exit."""
        results: list[tuple[StepResult, Failure | None] | None] = [None] * len(work)
        slots: list[list] = [[] for _ in work]  # filled by the thread: [result] or [exception]
        pending = list(range(len(work)))[::-1]
        running: dict[int, float] = {}  # step -> when its thread started
        limit = self.timeout_s + _GRACE_S

        def run(index: int) -> None:
            env, text = work[index]
            try:
                slots[index].append(checked_step(env.step(text)))
            except BaseException as e:  # noqa: BLE001 - handed to the rollout's thread
                slots[index].append(e)

        while pending or running:
            while pending and len(running) < self.workers:
                index = pending.pop()
                running[index] = time.monotonic()
                threading.Thread(target=run, args=(index,), daemon=True).start()
            now = time.monotonic()
            for index, started in list(running.items()):
                if slots[index]:
                    outcome = slots[index][0]
                    if isinstance(outcome, BaseException):
                        if stops_the_run(outcome):
                            raise outcome
                        failed = StepResult(done=True, tool_call=True, tool_error=True)
                        results[index] = (failed, failure_of(outcome, "environment"))
                    else:
                        results[index] = (outcome, None)
                    del running[index]
                elif now - started > limit:
                    timeout = StepResult(
                        done=True,
                        tool_call=True,
                        tool_error=True,
                        tool_timeout=True,
                        tool_seconds=now - started,
                    )
                    results[index] = (timeout, None)
                    del running[index]
            if running:
                time.sleep(_POLL_S)
        return results  # type: ignore[return-value]

    def _observation_ids(self, text: str, result: StepResult | None, finish: str) -> list[int]:
        role = result.role if result is not None else None
        if role is None or not getattr(self.tokenizer, "chat_template", None):
            # (without a chat template there are no messages: a role's text is appended as is)
            return self.tokenizer.encode(text, add_special_tokens=False)
        return chat_observation_ids(self.tokenizer, role, text, ended_at_eos=finish == "eos")

    def _batch(
        self, rows: list[_Row], num_prompts: int, n: int, versions: bool = False
    ) -> RolloutBatch:
        empty = torch.zeros(0, dtype=torch.long)
        completion_ids = [torch.cat(r.tokens) if r.tokens else empty for r in rows]
        failures = iter(first_tracebacks(r.failure for r in rows if r.failure is not None))
        failure = [next(failures) if r.failure is not None else None for r in rows]
        return RolloutBatch(
            prompt_ids=[torch.tensor(r.context[: r.prompt_len], dtype=torch.long) for r in rows],
            completion_ids=completion_ids,
            completion_text=[
                self.tokenizer.decode(c, skip_special_tokens=True) for c in completion_ids
            ],
            logprobs=[torch.cat(r.logprobs) if r.logprobs else torch.zeros(0) for r in rows],
            finish_reason=[r.finish for r in rows],
            prompt_index=[i for i in range(num_prompts) for _ in range(n)],
            loss_masks=[torch.cat(r.masks) if r.masks else torch.zeros(0) for r in rows],
            versions=[torch.cat(r.versions) if r.versions else empty for r in rows]
            if versions
            else None,
            tools=[
                ToolRecord(
                    r.calls,
                    r.errors,
                    r.timeouts,
                    r.seconds,
                    r.turns,
                    r.reward if f is None else 0.0,  # a failed environment's row scores 0
                    tuple(r.parts),
                    f,
                    dict(r.metrics) if f is None else {},  # a failed row reports none
                )
                for r, f in zip(rows, failure)
            ],
        )


def checked_step(result: Any) -> StepResult:
    """`result` when it is a StepResult whose reward is None or a finite real number
    (`checked_reward`) and whose metrics are None or a mapping of non-empty names to finite
    real numbers (then a copy of it, the numbers as floats); else TypeError or ValueError
    naming what the step returned."""
    if not isinstance(result, StepResult):
        raise return_error(result, "the environment's step", "a StepResult")
    if result.reward is not None:
        checked_reward(
            result.reward, "the environment's step", field="a StepResult whose reward is"
        )
    if result.metrics is not None:
        if not isinstance(result.metrics, Mapping):
            raise return_error(
                result.metrics,
                "the environment's step",
                "a mapping of names to numbers",
                field="a StepResult whose metrics are",
            )
        metrics = {}
        for name, value in result.metrics.items():
            if not isinstance(name, str) or not name:
                raise return_error(
                    name,
                    "the environment's step",
                    "a non-empty string",
                    field="a StepResult with a metric name",
                )
            metrics[name] = checked_reward(
                value, "the environment's step", field=f"a StepResult whose metric {name!r} is"
            )
        result = replace(result, metrics=metrics)  # a copy: the environment keeps its own
    return result


def environment_metrics(records: Sequence[Any]) -> dict[str, float]:
    """`env/<name>`: the mean of each of the environments' own figures (StepResult.metrics)
    over the rows that reported it, names in sorted order."""
    values: dict[str, list[float]] = {}
    for record in records:
        for name, value in record.metrics.items():
            values.setdefault(name, []).append(value)
    return {f"env/{name}": sum(v) / len(v) for name, v in sorted(values.items())}


def _turn_generator(
    generator: torch.Generator | None, base_seed: int | None, turn: int
) -> torch.Generator | None:
    if generator is None or base_seed is None:
        return None
    mixed = (base_seed * 1_000_003 + turn * 0x9E3779B9) % (2**63 - 1)
    return torch.Generator(device=generator.device).manual_seed(mixed)


_SENTINEL = "\u2063rlvr-assistant-turn\u2063"


def chat_observation_ids(tokenizer: Any, role: str, text: str, *, ended_at_eos: bool) -> list[int]:
    """The tokens a chat message of `role` adds after an assistant turn, ending with the
    template's generation prompt for the next assistant turn.

    Rendered from a fixed conversation (a user message, an assistant message holding a
    sentinel, then this message), so no earlier turn of the real conversation is ever
    re-rendered; the tokens are the rendering after the sentinel, less the end-of-turn token
    when the model sampled it itself (`ended_at_eos`)."""
    messages = [
        {"role": "user", "content": "?"},
        {"role": "assistant", "content": _SENTINEL},
        {"role": role, "content": text},
    ]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    at = rendered.find(_SENTINEL)
    if at < 0:
        raise ValueError("the chat template dropped the assistant turn's content")
    after = rendered[at + len(_SENTINEL) :]
    eos = tokenizer.eos_token or ""
    if ended_at_eos and eos and after.startswith(eos):
        after = after[len(eos) :]
    return tokenizer.encode(after, add_special_tokens=False)


def with_environment(engine: Engine, tokenizer: Any, env: EnvironmentConfig) -> Engine:
    """`engine` itself when the environment section `env` (rlvr.config.EnvironmentConfig)
    names none; else a MultiTurnEngine around it with that environment (its stop strings from
    `environment_from_config`)."""
    if not env.name:
        return engine
    chat = bool(getattr(tokenizer, "chat_template", None))
    if env.name == "python" and env.format == "hermes" and not chat:
        raise ConfigError(
            "environment.format: hermes shows tool output as a chat message, but this model's "
            "tokenizer has no chat template; use environment.format=tags or fenced"
        )
    make, stop = environment_from_config(env)
    return MultiTurnEngine(
        engine,
        tokenizer,
        make,
        max_turns=env.max_turns,
        stop=stop,
        timeout_s=env.timeout_s,
        workers=env.workers,
    )
