"""LLM judges as verifiers: `reward.verifier=judge:http://127.0.0.1:8000/v1`, docs/guides/judges.md.

    reward = score / max_score     score: what the judge's answer states (rubric.parse_score)

`JudgeVerifier` fills its rubric with the sample's prompt, the completion and the reference
answer, sends it as one user message to an OpenAI-compatible `/chat/completions` endpoint (the
spec's URL; `judge:serve`: a model rlvr serves itself, rlvr.training.judge_server), and reads
the score from the judge's answer only, in a strict format. A verifier is a security boundary
that runs in the trainer, so the judge is treated as hostile too: a request has a hard
wall-clock bound (`client.post`: hanging, slow-drip, huge, closed, garbage and HTTP errors all
end there), and an answer that is no chat completion, holds no score in the format, or one out
of range or not finite, raises a `JudgeError`. The trainer's one policy for failing verifiers
(rlvr.rewards.base) then makes it reward 0, counted in verifier_failures and recorded in
errors.jsonl; the run goes on.

Requests of one batch run concurrently: the trainer's Scorer calls `prefetch(verifier, texts,
samples)` before scoring one by one, which sends the batch's distinct requests through at most
`concurrency` threads and keeps each outcome for the call that scores it. Identical requests
(the same model, filled messages and sampling settings) are answered from an in-memory LRU of
`cache_size` answers for the life of the verifier, i.e. of the run; failures are not cached.
The answers of recent requests are kept for samples/step-N.jsonl (`judge_answers`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlvr.errors import ConfigError
from rlvr.rewards.base import Score
from rlvr.rewards.judge.client import (
    JudgeConnectionError,
    JudgeError,
    JudgeHTTPError,
    JudgeTimeout,
    endpoint_label,
    post,
)
from rlvr.rewards.judge.rubric import (
    DEFAULT_RUBRIC,
    JudgeAnswerError,
    JudgeScoreError,
    answer_text,
    fill_rubric,
    load_rubric,
    parse_score,
    rubric_values,
)
from rlvr.rewards.judge.spec import (
    JUDGE_PREFIX,
    SERVED,
    JudgeSettings,
    judge_name,
    parse_judge,
    settings_of,
)

__all__ = [
    "DEFAULT_RUBRIC",
    "JudgeAnswerError",
    "JudgeConnectionError",
    "JudgeError",
    "JudgeHTTPError",
    "JudgeScoreError",
    "JudgeSettings",
    "JudgeTimeout",
    "JudgeVerifier",
    "judge_answers",
    "judge_from_spec",
    "prefetch",
]

ANSWER_MAX_CHARS = 4000  # of a judge's answer, as samples/step-N.jsonl keeps it
_RECENT = 4096  # answers kept for samples/ (whatever cache_size is)
_PENDING_MAX = 65536  # prefetched outcomes not yet scored (a composite may stop before them)


class JudgeVerifier:
    """The judge at `url` (an OpenAI-compatible base URL) with `settings`; a verifier
    `(completion, sample) -> float` with `score -> Score(reward, the judge's answer)`.

    Built once per process that scores (the trainer, each pool worker); thread-safe. The API
    key is read from the environment variable `settings.api_key_env` names when the judge is
    built (a ConfigError if it is unset) and sent as a bearer token; it is in no spec, record
    or error."""

    def __init__(self, url: str, settings: JudgeSettings | None = None, name: str = "") -> None:
        self.url = url.rstrip("/")
        self.settings = s = settings or JudgeSettings()
        self.name = name or f"{JUDGE_PREFIX}{self.url}"
        self.endpoint = f"{self.url}/chat/completions"
        self.rubric = load_rubric(s.rubric)
        self._headers = {"Content-Type": "application/json", "Connection": "close"}
        if s.api_key_env:
            key = os.environ.get(s.api_key_env)
            if not key:
                raise ConfigError(
                    f"reward.judge_api_key_env: the environment variable {s.api_key_env} is "
                    "not set (it should hold the judge's API key)"
                )
            self._headers["Authorization"] = f"Bearer {key}"
        self._lock = threading.Lock()
        # request key -> (answer, whether it was cut at max_tokens), least recent first
        self._cache: OrderedDict[str, tuple[str, bool]] = OrderedDict()
        self._recent: OrderedDict[str, str] = OrderedDict()  # request key -> answer (FIFO)
        # request key -> [answer or the error, scorings still to come] (from `prefetch`)
        self._pending: OrderedDict[str, list[Any]] = OrderedDict()

    def __repr__(self) -> str:
        return f"JudgeVerifier({endpoint_label(self.url)})"

    # -- requests --------------------------------------------------------------------------------

    def request(self, completion: str, sample: Mapping[str, Any]) -> tuple[str, bytes]:
        """(cache key, JSON body) of the request that judges `completion` for `sample`."""
        s = self.settings
        body: dict[str, Any] = {
            "messages": [
                {
                    "role": "user",
                    "content": fill_rubric(self.rubric, rubric_values(completion, sample)),
                }
            ],
            "temperature": s.temperature,
            "max_tokens": s.max_tokens,
            "seed": s.seed,
        }
        if s.model:  # '' leaves it out: a one-model server (vLLM, rlvr serve) answers
            body = {"model": s.model, **body}
        payload = json.dumps(body, ensure_ascii=False, sort_keys=True).encode("utf-8")
        key = hashlib.sha256(self.endpoint.encode() + b"\0" + payload).hexdigest()
        return key, payload

    def _fetch(self, payload: bytes) -> tuple[str, bool]:
        """(the judge's answer text, whether it was cut) for one request (raises a
        JudgeError)."""
        s = self.settings
        body = post(self.endpoint, payload, self._headers, timeout_s=s.timeout_s, retries=s.retries)
        try:
            return answer_text(body)
        except JudgeError as e:
            raise type(e)(f"judge {endpoint_label(self.url)}: {e}") from None

    def _remember(self, key: str, answer: tuple[str, bool]) -> None:
        with self._lock:
            if self.settings.cache_size:
                self._cache[key] = answer
                self._cache.move_to_end(key)
                while len(self._cache) > self.settings.cache_size:
                    self._cache.popitem(last=False)
            self._recent[key] = answer[0][:ANSWER_MAX_CHARS]
            self._recent.move_to_end(key)
            while len(self._recent) > _RECENT:
                self._recent.popitem(last=False)

    def answer(self, key: str, payload: bytes) -> tuple[str, bool]:
        """(text, cut) of the answer to a request: from the cache, from a prefetch, or asked
        now."""
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
            entry = self._pending.get(key)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._pending[key]
        outcome = entry[0] if entry is not None else None
        if isinstance(outcome, JudgeError):  # raised again fresh: its own traceback here
            raise type(outcome)(str(outcome))
        if isinstance(outcome, BaseException):
            text = " ".join(str(outcome).split())[:120]
            raise JudgeError(f"judge {endpoint_label(self.url)}: {type(outcome).__name__}: {text}")
        answer = outcome if isinstance(outcome, tuple) else self._fetch(payload)
        self._remember(key, answer)
        return answer

    # -- the verifier ----------------------------------------------------------------------------

    def score(self, completion: str, sample: Mapping[str, Any]) -> Score:
        """Score(score / max_score, the judge's answer); raises a JudgeError when the judge
        gives no usable answer (the failure policy makes that 0)."""
        key, payload = self.request(completion, sample)
        answer, cut = self.answer(key, payload)
        if cut:
            raise JudgeAnswerError(
                f"judge {endpoint_label(self.url)}: its answer was cut at "
                f"reward.judge_max_tokens={self.settings.max_tokens}"
            )
        reward = parse_score(answer, self.settings.format, self.settings.max_score)
        return Score(reward, answer)

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return self.score(completion, sample).reward

    def prefetch(self, completions: Sequence[str], samples: Sequence[Mapping[str, Any]]) -> None:
        """Ask the batch's distinct uncached requests concurrently (at most `concurrency` at
        a time), keeping each outcome, answer or error, for the scorings to come; raises
        nothing (a request that cannot even be built fails when its completion is scored)."""
        wanted: dict[str, list[Any]] = {}  # key -> [payload, scorings]
        for completion, sample in zip(completions, samples):
            try:
                key, payload = self.request(completion, sample)
            except Exception:  # noqa: BLE001 - scored (and failed) one by one later
                continue
            wanted.setdefault(key, [payload, 0])[1] += 1
        with self._lock:
            todo = {k: v for k, v in wanted.items() if k not in self._cache}
        if not todo:
            return
        workers = min(self.settings.concurrency, len(todo))
        with ThreadPoolExecutor(workers, thread_name_prefix="rlvr-judge") as pool:
            futures = {key: pool.submit(self._fetch, payload) for key, (payload, _) in todo.items()}
        with self._lock:
            for key, future in futures.items():
                error = future.exception()
                self._pending[key] = [error if error is not None else future.result(), todo[key][1]]
                self._pending.move_to_end(key)
            while len(self._pending) > _PENDING_MAX:
                self._pending.popitem(last=False)

    def recorded(self, completion: str, sample: Mapping[str, Any]) -> str | None:
        """The judge's answer for this completion if it was asked recently (for samples/)."""
        try:
            key, _ = self.request(completion, sample)
        except Exception:  # noqa: BLE001 - a sample the judge could not be asked about
            return None
        with self._lock:
            return self._recent.get(key)


def judge_from_spec(item: str) -> JudgeVerifier | _UnservedJudge:
    """The JudgeVerifier of one `judge:URL#settings` spec item (no weight): rlvr.rewards.
    registry's entry. A `judge:serve` item here (not replaced by rlvr train) is a ConfigError
    when it scores."""
    url, given = parse_judge(item)
    settings = settings_of(given, item)
    if url == SERVED:
        return _UnservedJudge(item)
    return JudgeVerifier(url, settings, name=judge_name(item))


class _UnservedJudge:
    """`judge:serve` outside `rlvr train` (no server to point it at): building it succeeds, so
    that a config naming it can be checked, and scoring with it stops the run, saying why."""

    def __init__(self, item: str) -> None:
        self.name = item.partition("#")[0].strip()

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        raise ConfigError(
            f"reward.verifier: {self.name} is the judge rlvr train serves from "
            "reward.judge_serve; elsewhere (rlvr eval, rlvr sample, rlvr verify) name the "
            "judge's URL: judge:http://HOST:PORT/v1"
        )


def _judges(verifier: Any) -> list[tuple[str, JudgeVerifier]]:
    """(name, judge) of `verifier` itself or of each component of a weighted sum."""
    components = getattr(verifier, "components", None)
    if isinstance(components, Mapping):
        return [(n, v) for n, (v, _) in components.items() if isinstance(v, JudgeVerifier)]
    return [(verifier.name, verifier)] if isinstance(verifier, JudgeVerifier) else []


def prefetch(
    verifier: Any, completions: Sequence[str], samples: Sequence[Mapping[str, Any]]
) -> None:
    """`JudgeVerifier.prefetch` of `verifier`, or of each judge in a weighted sum, over a
    batch about to be scored one completion at a time (the Scorer's in-process path)."""
    for _, judge in _judges(verifier):
        judge.prefetch(completions, samples)


def judge_answers(
    verifier: Any,
) -> Callable[[str, Mapping[str, Any]], dict[str, str]] | None:
    """For samples/step-N.jsonl: a function giving {judge name: its answer} for a completion
    and its sample (the answers this process's judges gave recently), or None when `verifier`
    has no judge. Judges in verifier-pool workers answer there, so with reward.workers > 0 the
    training completions have none."""
    judges = _judges(verifier)
    if not judges:
        return None

    def answers(completion: str, sample: Mapping[str, Any]) -> dict[str, str]:
        out = {}
        for name, judge in judges:
            text = judge.recorded(completion, sample)
            if text is not None:
                out[name] = text
        return out

    return answers
