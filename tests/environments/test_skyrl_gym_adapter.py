"""skyrl-gym environments through `environment.name=skyrl-gym:...`: docs/examples/skyrl_gym_env.py
(written with skyrl_gym's public API only) stepped by hand, a built-in scoring the row's answer,
errors as one-line config errors, observations as chat messages or plain text, the learner's
log-probs equal to the sampler's, and training through the CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from rlvr.config import EnvironmentConfig
from rlvr.environments import registry
from rlvr.environments.adapters.skyrl_gym import factory
from rlvr.errors import ConfigError
from rlvr.rollout import SamplingParams
from rlvr.rollout.multi_turn import MultiTurnEngine, chat_observation_ids
from tests.conftest import assert_token_exact
from tests.rollout.test_multi_turn import CHATML, ScriptedEngine, ascii_chat_tokenizer

skyrl_gym = pytest.importorskip("skyrl_gym")
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402
from skyrl_gym.envs.registration import deregister  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = f"{REPO}/docs/examples/skyrl_gym_env.py:addition_hints"
SAMPLE = {"id": "addition-3d-347+285", "prompt": "347+285=", "answer": "632"}
SECTION = EnvironmentConfig(name=f"skyrl-gym:{EXAMPLE}", max_turns=3)


@pytest.fixture
def make_env():
    return factory(EXAMPLE, SECTION, {})


def test_the_example_gives_hints_and_sums_its_steps_rewards(make_env):
    env = make_env()
    assert make_env() is not env
    assert env.reset(SAMPLE) is None  # init kept the prompt: nothing to add
    first = env.step("522")
    assert (first.observation, first.role, first.done) == ("\nhigher\n347+285=", "user", False)
    assert first.metrics == {"correct": 0.0, "answered": 1.0}
    assert env.step("<think>carry</think>700").observation == "\nlower\n347+285="
    last = env.step("632")
    assert (last.reward, last.done, last.observation) == (0.5, True, None)
    assert last.metrics == {"correct": 1.0, "answered": 1.0, "turns": 3.0}  # + get_metrics()
    env.reset(SAMPLE)  # a reset makes a fresh skyrl-gym environment
    assert env.step("<think>7+5+0=12,4+8+1=13,3+2+1=06</think>632").reward == 1.0


def test_a_built_in_environment_scores_the_rows_answer():
    make = factory("gsm8k", SECTION, {})
    env = make()
    assert env.reset({"prompt": "How many?", "answer": "5"}) is None
    assert env.step("so #### 5").reward == 1.0
    env.reset({"prompt": "How many?", "answer": "5"})
    assert env.step("#### 6").reward == 0.0
    # a dataset's own reward_spec column wins over the answer
    env.reset({"prompt": "q", "answer": "5", "reward_spec": {"ground_truth": "7"}})
    assert env.step("#### 7").reward == 1.0


class RaisesInInit(BaseTextEnv):
    def __init__(self, env_config=None, extras=None):
        super().__init__()
        raise RuntimeError("cannot reach the database")


class NeedsARowField(BaseTextEnv):
    def __init__(self, env_config=None, extras=None):
        super().__init__()
        assert "db_id" in extras, "db_id field is required"


class RewritesThePrompt(BaseTextEnv):
    def __init__(self, env_config=None, extras=None):
        super().__init__()

    def init(self, prompt):
        return [{"role": "system", "content": "Use tools."}, *prompt], {}

    def step(self, action):
        return BaseTextEnvStepOutput(observations=[], reward=1.0, done=True, metadata={})


@pytest.fixture
def registered():
    ids = {
        "rlvr-raises": RaisesInInit,
        "rlvr-db": NeedsARowField,
        "rlvr-rewrites": RewritesThePrompt,
    }
    for env_id, cls in ids.items():
        skyrl_gym.register(id=env_id, entry_point=cls)
    yield
    for env_id in ids:
        deregister(env_id)


def test_errors_are_one_line_config_errors_at_factory_time(registered, tmp_path):
    for ref, match in [
        ("no-such-env", "skyrl_gym has no environment 'no-such-env'"),
        ("rlvr-raises", "could not be made with environment.args=.*cannot reach the database"),
        ("no_such_module:gsm8k", "cannot import module 'no_such_module'"),
        (f"{tmp_path}/missing.py:x", "not found"),
    ]:
        with pytest.raises(ConfigError, match=f"environment.name: skyrl-gym:.*{match}") as info:
            factory(ref, SECTION, {})
        assert "\n" not in str(info.value)
    # the built-in search environment reads its env_config (environment.args) when it is made
    with pytest.raises(ConfigError, match=r"environment.args=\[\].*Missing key search_url"):
        factory("search", SECTION, {})
    # a constructor asserting a field only a real row has is left to the rows
    make = factory("rlvr-db", SECTION, {})
    with pytest.raises(AssertionError, match="db_id"):
        make().reset(SAMPLE)
    make().reset({**SAMPLE, "db_id": "shop"})


def test_an_init_that_rewrites_the_prompt_fails_the_row(registered):
    tok = ascii_chat_tokenizer(CHATML)
    engine = MultiTurnEngine(
        ScriptedEngine(tok, ["1"]), tok, factory("rlvr-rewrites", SECTION, {}), max_turns=2
    )
    batch = engine.generate([[5, 6]], 1, SamplingParams(max_new_tokens=40), samples=[SAMPLE])
    record = batch.tools[0]
    assert record.failure is not None and "changed the prompt's messages" in record.failure.error
    assert record.env_reward == 0.0


def test_observations_are_chat_messages_under_a_chat_template_and_text_without(make_env):
    tok = ascii_chat_tokenizer(CHATML)
    engine = MultiTurnEngine(ScriptedEngine(tok, ["522", "632"]), tok, make_env, max_turns=3)
    batch = engine.generate([[5, 6]], 1, SamplingParams(max_new_tokens=200), samples=[SAMPLE])
    inserted = batch.completion_ids[0][batch.loss_masks[0] == 0].tolist()
    assert inserted == chat_observation_ids(tok, "user", "\nhigher\n347+285=", ended_at_eos=True)
    assert batch.tools[0].env_reward == 0.75 and batch.tools[0].metrics["turns"] == 2.0
    tok.chat_template = None  # a base model (the embedded ones): the message's text as it is
    engine = MultiTurnEngine(ScriptedEngine(tok, ["522", "632"]), tok, make_env, max_turns=3)
    batch = engine.generate([[5, 6]], 1, SamplingParams(max_new_tokens=200), samples=[SAMPLE])
    inserted = batch.completion_ids[0][batch.loss_masks[0] == 0].tolist()
    assert inserted == tok.encode("\nhigher\n347+285=", add_special_tokens=False)


class StepRaises(BaseTextEnv):
    def __init__(self, env_config=None, extras=None):
        super().__init__()

    def step(self, action):
        raise ValueError("tool server down")


def test_a_step_that_raises_fails_its_row_with_reward_0():
    skyrl_gym.register(id="rlvr-step-raises", entry_point=StepRaises)
    try:
        tok = ascii_chat_tokenizer(CHATML)
        make = factory("rlvr-step-raises", SECTION, {})
        engine = MultiTurnEngine(ScriptedEngine(tok, ["1"]), tok, make, max_turns=2)
        batch = engine.generate([[5]], 2, SamplingParams(max_new_tokens=40), samples=[SAMPLE])
    finally:
        deregister("rlvr-step-raises")
    assert all(t.failure is not None and t.env_reward == 0.0 for t in batch.tools)
    assert "tool server down" in batch.tools[0].failure.error


def test_learner_logprobs_match_the_samplers_on_every_sampled_token(make_env):
    """The embedded model playing the example: at every sampled position the update's log-prob
    equals the sampler's; the hints are inserted masked out (mask 0, log-prob 0), exactly the
    tokens of their text."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.embedded import embedded_model_path
    from rlvr.rollout import FastEngine

    path = embedded_model_path()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    assert not tok.chat_template  # the hints are plain text for this model
    engine = MultiTurnEngine(FastEngine(model, tok), tok, make_env, max_turns=3)
    samples = [{"prompt": "964+494=", "answer": "1458"}, SAMPLE]
    prompts = [tok.encode(s["prompt"], add_special_tokens=False) for s in samples]
    gen = torch.Generator().manual_seed(0)
    batch = engine.generate(
        prompts, 3, SamplingParams(max_new_tokens=96), generator=gen, samples=samples
    )
    assert not any(t.failure for t in batch.tools)
    assert any(t.turns > 1 for t in batch.tools), "no hint was shown: the test checks nothing"
    assert_token_exact(model, tok, batch, observations=True)


def test_the_example_trains_the_embedded_model_through_the_cli(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_FACTORIES", {})
    out = tmp_path / "run"
    args = ["train", "--quiet", "--output-dir", str(out), f"environment.name=skyrl-gym:{EXAMPLE}"]
    args += ["environment.max_turns=3", "training.steps=2", "rollout.prompts_per_step=2"]
    args += ["rollout.group_size=2", "eval.size=2", "eval.t1_samples=1", "logging.samples_every=1"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward_mean" in r]
    assert len(steps) == 2 and all(0.0 <= s["env/correct"] <= 1.0 for s in steps)
    assert all(1.0 <= s["env/turns"] <= 3.0 for s in steps if "env/turns" in s)
    assert steps[0]["environment_failures"] == 0
    samples = [json.loads(line) for line in (out / "samples/step-1.jsonl").read_text().splitlines()]
    for sample in samples:
        if sample["finish_reason"] != "length":  # the environment ended it and scored it
            assert sample["reward"] == 1.0 - 0.25 * (sample["turns"] - 1) or sample["reward"] == 0


def test_the_docs_listing_is_the_example_file():
    page = (REPO / "docs/environments/skyrl-gym.md").read_text()
    listing = page.split("<!-- docs-test: skip the listing", 1)[1].split("```python\n", 1)[1]
    assert listing.split("\n```", 1)[0] in (REPO / "docs/examples/skyrl_gym_env.py").read_text()


def test_a_module_named_before_the_id_is_imported_first_and_once(tmp_path, monkeypatch):
    (tmp_path / "rlvr_test_skyrl_envs.py").write_text(
        "from skyrl_gym import register\n"
        "register(id='rlvr-from-module', entry_point='skyrl_gym.envs.gsm8k.env:GSM8kEnv')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        for _ in range(2):  # a second factory (evaluation's, a resumed run's) registers nothing
            env = factory("rlvr_test_skyrl_envs:rlvr-from-module", SECTION, {})()
            env.reset({"prompt": "q", "answer": "3"})
            assert env.step("#### 3").reward == 1.0
    finally:
        deregister("rlvr-from-module")
        monkeypatch.delitem(sys.modules, "rlvr_test_skyrl_envs")
