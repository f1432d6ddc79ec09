"""OpenEnv environments (`environment.name=openenv:...`): a server written with openenv-core's
public API (docs/examples/openenv_guess.py) served on 127.0.0.1, one session per rollout row,
the model's turn as the action and the observation's text as the next context; its rollouts
train token-exactly; a hung step costs its time-out, a server that dies mid-run fails its rows
and the run finishes."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from rlvr.config import EnvironmentConfig
from rlvr.environments import StepResult
from rlvr.errors import ConfigError
from tests.conftest import assert_token_exact

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("openenv") is None, reason="needs openenv-core"),
    pytest.mark.slow,  # the servers take ~5 s to start (importing openenv imports gradio)
]

HERE = Path(__file__).resolve().parent
SERVER = f"{HERE / 'openenv_flaky.py'}:app"  # the docs' example, able to hang and to die


def openenv_factory(ref: str, **settings):
    from rlvr.environments.adapters.openenv import factory

    timeout_s = settings.pop("timeout_s", 5.0)
    env = EnvironmentConfig(name=f"openenv:{ref}", timeout_s=timeout_s, max_turns=3)
    return factory(ref, env, settings)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def servers():
    """(the factory of a server rlvr started from the app's file, the URL of one started here
    with OPENENV_DIE_AFTER=13: it exits in its 13th step). Both boot at once (~5 s each)."""
    port = free_port()
    dying = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "openenv_flaky:app", "--app-dir", str(HERE)]
        + ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        env={**os.environ, "OPENENV_DIE_AFTER": "13"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    make = openenv_factory(SERVER)
    try:
        yield make, f"http://127.0.0.1:{port}"
    finally:
        make.server.stop()
        dying.kill()
        dying.wait()


def test_a_session_plays_the_servers_game(servers):
    make, _ = servers
    env = make()
    assert env.reset({"prompt": "347+285=", "answer": "632", "unsendable": object()}) == ""
    steps = [env.step(turn) for turn in ["522", "<think>about 700</think>700", "632"]]
    assert steps[0] == StepResult(
        observation="\nhigher\n347+285=", reward=0.0, metrics={"wrong": 1.0}
    )
    assert steps[1].observation == "\nlower\n347+285=" and not steps[1].done
    assert steps[2].reward == 0.5 and steps[2].done and steps[2].metrics == {"wrong": 2.0}
    assert env.step("632") == StepResult(done=True)  # the session is closed: nothing is sent
    assert make.stop == () and make.server.process.poll() is None


def test_a_hung_step_ends_its_row_as_a_timeout_within_its_limit(servers):
    make = openenv_factory(servers[0].url, timeout_s=1.0)  # the same server, by its URL
    env = make()
    env.reset({"prompt": "1+1=", "answer": "2"})
    started = time.monotonic()
    result = env.step("hang")
    assert time.monotonic() - started < 1.5
    assert result.tool_timeout and result.tool_error and result.done and result.reward == 0.0
    other = make()  # the server itself still answers
    other.reset({"prompt": "1+1=", "answer": "2"})
    assert other.step("2").reward == 1.0


def test_a_server_that_does_not_answer_is_a_config_error(servers):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(
        ConfigError, match=f"environment.name: no OpenEnv server answered GET {url}"
    ):
        openenv_factory(url)
    with pytest.raises(ConfigError, match=r"environment.name: openenv:.*nothing.py:app: .* not"):
        openenv_factory(f"{HERE / 'nothing.py'}:app")
    with pytest.raises(ConfigError, match='exited at start-up .*import module "no_such_mod"'):
        openenv_factory("no_such_mod:app")


def test_bad_settings_are_config_errors_naming_environment_args(servers):
    url = servers[0].url
    for settings, message in [
        ({"action_fields": "message"}, "'action_fields' is no openenv setting"),
        ({"action_field": "text"}, r"action_field='text' is no field .* \(message\)"),
        ({"observation_field": "guess"}, "observation_field='guess' is no field"),
        ({"stop": 3}, "stop=3; expected a list of strings"),
        ({"metrics": "yes"}, "metrics='yes'"),
    ]:
        with pytest.raises(ConfigError, match=f"environment.args: {message}"):
            openenv_factory(url, **settings)
    assert openenv_factory(url, stop=["\n"], observation_field="prompt").stop == ("\n",)


def test_learner_logprobs_match_the_samplers_through_the_server(servers):
    """The embedded model against the real server: at every sampled position the update's
    log-prob equals the sampler's; the server's hints are the inserted tokens (mask 0,
    log-prob 0), exactly the tokens of their text."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.embedded import embedded_model_path
    from rlvr.rollout import FastEngine, SamplingParams
    from rlvr.rollout.multi_turn import MultiTurnEngine

    path = embedded_model_path()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    assert not tok.chat_template  # plain-text observations are what this model reads
    make, _ = servers
    engine = MultiTurnEngine(FastEngine(model, tok), tok, make, max_turns=3)
    samples = [{"prompt": "964+494=", "answer": "1458"}, {"prompt": "347+285=", "answer": "632"}]
    prompts = [tok.encode(s["prompt"], add_special_tokens=False) for s in samples]
    gen = torch.Generator().manual_seed(0)
    batch = engine.generate(
        prompts, 3, SamplingParams(max_new_tokens=96), generator=gen, samples=samples
    )
    assert not any(t.failure for t in batch.tools)
    assert any(t.turns > 1 for t in batch.tools), "no hint was shown: the test checks nothing"
    assert all(t.env_reward is not None for t in batch.tools if t.turns < 3)  # the server's reward
    # (fp32 rounding: the fast engine's fused projections, as in tests/rollout/test_fast_engine)
    assert_token_exact(model, tok, batch, atol=1e-4, observations=True)


def test_a_server_dying_mid_run_fails_its_rows_and_the_run_finishes(servers, tmp_path):
    _, url = servers
    deadline = time.monotonic() + 60
    while True:  # booted with the module's other server
        try:
            urllib.request.urlopen(url + "/health", timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the dying server never started"
            time.sleep(0.1)
    out = tmp_path / "run"
    args = ["train", "--quiet", "--output-dir", str(out), f"environment.name=openenv:{url}"]
    args += ["environment.max_turns=3", "environment.timeout_s=10", "training.steps=4"]
    args += ["rollout.prompts_per_step=2", "rollout.group_size=2", "eval.size=0"]
    started = time.monotonic()
    assert main(args) == 0
    assert time.monotonic() - started < 60
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward_mean" in r]
    assert len(steps) == 4
    failures = [r["environment_failures"] for r in steps]
    assert failures[0] == 0 and failures[-1] == 4, failures  # 13 steps: after step 1 at least
    assert all(r["time_generate_s"] < 10 for r in steps)  # no rollout waited a time-out
    errors = (out / "errors.jsonl").read_text()
    assert "OpenEnv server" in errors
