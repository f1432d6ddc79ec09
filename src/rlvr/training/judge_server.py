"""The trainer's LLM judges: the config's `reward.judge_*` settings written into each judge item
of `reward.verifier` (and of `reward.mix_verifier`), and `judge:serve`'s model served in this
process.

    judges, cfg = start_judges(cfg, log)    # before the verifier is built from cfg
    ...
    judges.close()                          # the end of the run (the loop's finally)

`reward.judge_serve=MODEL` (anything `model.name_or_path` takes: `embedded`, a hub id, a run's
`final/`) loads that model for inference and serves it with `rlvr.serve.Server` on 127.0.0.1, a
free port, in a background thread; each `judge:serve` item of the spec then points at it.
`start_judges` returns a copy of the config whose `reward.verifier` carries every judge's
settings (rlvr.rewards.judge.spec.with_settings), so the verifier the trainer builds, a verifier
pool's workers and Ray's reward actors all build the same judges from it; the run's
config.yaml keeps the spec as it was written (the trainer records its own, unchanged config).

Everything is checked before the judge's model loads: the spec's settings, the rubric file, and
that `judge:serve` and `reward.judge_serve` come together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from rlvr.config import Config, ModelConfig
from rlvr.errors import ConfigError
from rlvr.rewards.judge import judge_answers, judge_from_spec
from rlvr.rewards.judge.spec import (
    JUDGE_PREFIX,
    SERVED,
    is_judge,
    judge_settings,
    split_judge_weight,
    with_settings,
)
from rlvr.serve import ServeConfig, Server

# what a placeholder URL checks the served items' settings with, before the model loads
_UNSERVED = "http://127.0.0.1:1/v1"


def _items(spec: Any) -> list[str]:
    """The judge items of a spec (a string, or from Python a list of names and pairs)."""
    if isinstance(spec, str):
        return [split_judge_weight(p)[0] for p in spec.split(",") if is_judge(p)]
    if isinstance(spec, (list, tuple)):
        out = []
        for x in spec:
            item = x[0] if isinstance(x, (list, tuple)) and len(x) == 2 else x
            if is_judge(item):
                out.append(split_judge_weight(item)[0])
        return out
    return []


def _served(item: str) -> bool:
    target = item[len(JUDGE_PREFIX) :]
    return target == SERVED or target.startswith(SERVED + "#")


class Judges:
    """What `start_judges` started: the served judge's server, if any."""

    def __init__(self, server: Server | None = None) -> None:
        self.server = server

    @property
    def url(self) -> str | None:
        return self.server.url if self.server is not None else None

    def answers(self, verifier: Any) -> Callable[[str, Mapping[str, Any]], dict[str, str]] | None:
        """{judge name: answer} of a completion, for samples/ (`judge_answers`)."""
        return judge_answers(verifier)

    def close(self) -> None:
        """Stop the served judge (idempotent)."""
        if self.server is not None:
            self.server.close()
            self.server = None


def start_judges(cfg: Config, log: Callable[[str], None] = print) -> tuple[Judges, Config]:
    """(the judges started, `cfg` with every judge item's settings in `reward.verifier`);
    `cfg` itself, unchanged, and nothing started when the spec names no judge and
    reward.judge_serve is empty."""
    reward = cfg.reward
    # the judges of reward.verifier and of reward.mix_verifier (data.mix_path's prompts)
    specs = [spec for spec in (reward.verifier, reward.mix_verifier) if spec]
    items = [item for spec in specs for item in _items(spec)]
    served = [item for item in items if _served(item)]
    if served and not reward.judge_serve:
        raise ConfigError(
            "reward.verifier: judge:serve needs reward.judge_serve=MODEL, the model rlvr "
            "serves as the judge (e.g. reward.judge_serve=embedded)"
        )
    if reward.judge_serve and not served:
        raise ConfigError(
            f"reward.judge_serve={reward.judge_serve}: reward.verifier has no judge:serve item "
            "to point at it (e.g. reward.verifier=judge:serve)"
        )
    if not items:
        return Judges(), cfg
    settings = judge_settings(reward)
    if served and not settings.get("model"):
        settings["model"] = reward.judge_serve  # what the server's answers report anyway
    for item in [i for spec in specs for i in _items(with_settings(spec, settings, _UNSERVED))]:
        judge_from_spec(item)  # every setting checked, the rubric read, the API key found
    if workers_limit_first(cfg):
        log(
            f"warning: reward.timeout_s={reward.timeout_s:g} is below reward.judge_timeout_s="
            f"{reward.judge_timeout_s:g}: a verifier pool's worker is killed first, at its limit"
        )
    server = None
    if served:
        serve_cfg = ServeConfig(
            model=ModelConfig(name_or_path=reward.judge_serve, device=cfg.model.device)
        )
        serve_cfg.validate()
        server = Server(serve_cfg)  # loads the model
        log(f"judge: serving {reward.judge_serve} at {server.start()} for judge:serve")
    judges = Judges(server)
    try:
        spec = with_settings(reward.verifier, settings, judges.url)
        mix = reward.mix_verifier and with_settings(reward.mix_verifier, settings, judges.url)
    except BaseException:
        judges.close()
        raise
    reward = dataclasses.replace(reward, verifier=spec, mix_verifier=mix or None)
    return judges, dataclasses.replace(cfg, reward=reward)


def workers_limit_first(cfg: Config) -> bool:
    """Whether a verifier pool's per-sample limit ends a judge request before its own does."""
    reward = cfg.reward
    return reward.workers > 0 and reward.timeout_s <= reward.judge_timeout_s
