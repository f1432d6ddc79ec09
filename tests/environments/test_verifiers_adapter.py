"""`environment.name=verifiers:ENV_ID`: an environment written with Prime Intellect's verifiers
API only (docs/examples/verifiers_env.py) trains unchanged; its episode is played token-exactly
(rlvr samples, the env's user turns are masked observations); its rubric's weighted sum is the
reward and each component an env/<name> metric; bad names and failing rubrics fail as rlvr's
environments do."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.cli import main
from rlvr.config import EnvironmentConfig
from rlvr.environments import registry
from rlvr.environments.registry import environment_from_config, environment_rows
from rlvr.errors import ConfigError
from rlvr.models.embedded import embedded_model_path
from rlvr.models.loading import encode_prompt
from rlvr.rollout import FastEngine, HFEngine, SamplingParams
from rlvr.rollout.multi_turn import MultiTurnEngine, chat_observation_ids
from tests.conftest import assert_token_exact, build_tiny_llama
from tests.rollout.test_multi_turn import CHATML, ScriptedEngine, ascii_chat_tokenizer

pytest.importorskip("verifiers.v1")

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "verifiers_env.py"
NAME = f"verifiers:{EXAMPLE}"


@pytest.fixture(autouse=True)
def fresh_factories(monkeypatch):
    monkeypatch.setattr(registry, "_FACTORIES", {})


def make(name: str = NAME, args: list[str] | None = None, max_turns: int = 2):
    env = EnvironmentConfig(name=name, args=args or ["num_tasks=40"], max_turns=max_turns)
    return env, *environment_from_config(env)


def play(make_env, sample, turns):
    env = make_env()
    assert env.reset(sample) is None
    results = [env.step(turn) for turn in turns]
    return results


def test_the_rubric_scores_the_episode_and_the_env_plays_the_user():
    env, make_env, stop = make()
    assert stop == ()
    train, heldout = environment_rows(env)
    assert heldout == [] and len(train) == 40  # no split of its own: rlvr holds some out
    sample = {**train[0], "prompt": train[0]["prompt"]}
    answer = int(sample["answer"])
    wrong, right = str(answer - 3), f"<think>...</think>{answer}"
    hint, done = play(make_env, sample, [wrong, right])
    assert not hint.done and (hint.observation, hint.role) == (
        f"higher\n{sample['prompt']}",
        "user",
    )
    assert done.done and done.reward == 0.5  # solved 0.5, not at the first try
    assert done.metrics == {"first_try": 0.0, "solved": 1.0, "guesses": 2.0}
    (first,) = play(make_env, sample, [right])
    assert first.done and first.reward == 1.0 and first.metrics["first_try"] == 1.0
    # the player's max_turns (2) ends the exchange: the second wrong answer is scored 0
    _, last = play(make_env, sample, [wrong, str(answer + 7)])
    assert last.done and last.reward == 0.0 and last.metrics["guesses"] == 2.0


def test_environment_max_turns_caps_the_envs_own_limit():
    _, make_env, _ = make(max_turns=1)
    env = EnvironmentConfig(name=NAME, args=["num_tasks=40"], max_turns=1)
    sample = environment_rows(env)[0][0]
    (only,) = play(make_env, sample, [str(int(sample["answer"]) + 1)])
    assert only.done and only.reward == 0.0 and only.metrics["guesses"] == 1.0


def test_a_sample_of_another_data_source_is_a_task_of_the_env():
    _, make_env, _ = make()
    (result,) = play(make_env, {"prompt": "2+2=", "answer": "4"}, ["4"])
    assert result.done and result.reward == 1.0


def test_a_different_prompt_than_the_envs_fails_the_row():
    _, make_env, _ = make()
    env = make_env()
    sample = {"prompt": "2+2=", "answer": "4", "vf_task": {"prompt": "3+3=", "answer": 6}}
    with pytest.raises(RuntimeError, match="not on the row's prompt"):
        env.reset(sample)


@pytest.mark.parametrize("engine_cls", [HFEngine, FastEngine])
def test_learner_logprobs_match_the_samplers_on_the_embedded_model(engine_cls):
    """The embedded model (no chat template): the user turns are plain text after the
    model's EOS, masked; every sampled token's learner log-prob is the sampler's."""
    path = embedded_model_path()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    assert not getattr(tok, "chat_template", None)
    env, make_env, stop = make()
    rows = environment_rows(env)[0][:6]
    engine = MultiTurnEngine(engine_cls(model, tok), tok, make_env, max_turns=2, stop=stop)
    prompts = [encode_prompt(tok, r["prompt"], chat=False) for r in rows]
    gen = torch.Generator().manual_seed(0)
    batch = engine.generate(prompts, 2, SamplingParams(max_new_tokens=64), gen, samples=rows)
    assert all(t.failure is None for t in batch.tools)
    assert any(t.turns == 2 for t in batch.tools), "no row got a hint: nothing is exercised"
    assert_token_exact(model, tok, batch, atol=1e-4)  # float32 noise of a 128-wide model
    for row, record in zip((r for r in rows for _ in range(2)), batch.tools):
        for who, text in record.transcript:
            if who == "env":
                assert text.startswith(("higher\n", "lower\n")) and text.endswith(row["prompt"])
        assert record.env_reward in (0.0, 0.5, 1.0)


def test_user_turns_are_chat_messages_under_a_chat_template():
    """Under a chat template the prompt is the chat's and a hint is a user message: its
    tokens are the difference that message makes (chat_observation_ids), masked."""
    tok = ascii_chat_tokenizer(CHATML)
    env, make_env, stop = make()
    row = environment_rows(env)[0][0]
    prompt = encode_prompt(tok, row["prompt"], chat=True)
    scripted = ScriptedEngine(tok, ["1", row["answer"]])  # wrong, then right
    engine = MultiTurnEngine(scripted, tok, make_env, max_turns=2, stop=stop)
    batch = engine.generate([prompt], 1, SamplingParams(max_new_tokens=80), samples=[row])
    (record,) = batch.tools
    assert record.failure is None and record.env_reward == 0.5 and record.turns == 2
    hint = chat_observation_ids(tok, "user", f"higher\n{row['prompt']}", ended_at_eos=True)
    assert batch.completion_ids[0][~batch.loss_masks[0].bool()].tolist() == hint
    first = tok.encode("1", add_special_tokens=False) + [tok.eos_token_id]
    assert scripted.calls[1] == [prompt + first + hint]  # the model's context: never re-rendered
    # a real model under the same template: every sampled token's log-prob is the sampler's
    model = build_tiny_llama(tok, seed=2)
    engine = MultiTurnEngine(HFEngine(model, tok), tok, make_env, max_turns=2, stop=stop)
    gen = torch.Generator().manual_seed(1)
    batch = engine.generate([prompt], 3, SamplingParams(max_new_tokens=48), gen, samples=[row])
    assert_token_exact(model, tok, batch)


def test_training_through_the_cli_logs_the_rubric(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--quiet", "--output-dir", str(out), f"environment.name={NAME}"]
    args += ["data.task=environment", "environment.args=[num_tasks=64]", "environment.max_turns=2"]
    args += ["training.steps=2", "rollout.prompts_per_step=2", "rollout.group_size=4"]
    args += ["eval.size=4", "eval.t1_samples=1", "logging.samples_every=1"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if "reward_mean" in r)
    assert {"env/first_try", "env/solved", "env/guesses"} <= set(step)
    assert step["environment_failures"] == 0
    after = json.loads((out / "summary.json").read_text())["eval_after"]
    assert "env/first_try_greedy" in after and 0.0 <= after["accuracy"] <= 1.0
    for line in (out / "samples/step-1.jsonl").read_text().splitlines():
        sample = json.loads(line)
        if sample["finish_reason"] != "length":
            m = sample["env_metrics"]
            assert sample["reward"] == pytest.approx(0.5 * m["first_try"] + 0.5 * m["solved"])


# -- errors ------------------------------------------------------------------------------------


def test_names_that_do_not_load_are_one_line_config_errors(tmp_path):
    broken = tmp_path / "broken_env.py"
    broken.write_text("def load_environment(**kwargs):\n    raise ValueError('no data here')\n")
    not_env = tmp_path / "not_env.py"
    not_env.write_text("def load_environment(**kwargs):\n    return 42\n")
    plain = tmp_path / "plain_module.py"
    plain.write_text("X = 1\n")
    for name, match in [
        ("verifiers:no_such_env_pkg", "unknown environment.*not found"),
        (f"verifiers:{tmp_path / 'missing.py'}", "not found"),
        (f"verifiers:{broken}", "could not be loaded: ValueError: no data here"),
        (f"verifiers:{plain}", "could not be loaded.*__all__"),
        (f"verifiers:{not_env}", "returned int, not a vf.Env"),
        (f"verifiers:{EXAMPLE}", "could not be loaded.*no_such_field"),
    ]:
        args = ["no_such_field=1"] if name.endswith("verifiers_env.py") else []
        with pytest.raises(ConfigError, match=f"environment.name: verifiers:.*{match}") as e:
            make(name, args=args)
        assert "\n" not in str(e.value)


def test_a_failing_rubric_fails_its_row(tmp_path, monkeypatch):
    """A reward function that raises: the row scores 0 and its failure is recorded."""
    module = tmp_path / "failing_rubric.py"
    module.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(EXAMPLE.parent)!r})
            import verifiers.v1 as vf
            import verifiers_env as base

            class Failing(base.HintedAddition):
                @vf.reward(weight=1.0)
                async def broken(self, trace: vf.Trace) -> float:
                    return 1 / 0

            class FailingTaskset(
                base.HintedAdditionTaskset, vf.Taskset[Failing, base.HintedAdditionConfig]
            ):
                def load(self):
                    return [Failing(t.data, self.config.task) for t in super().load()]

            __all__ = ["FailingTaskset"]
            """
        )
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    env = EnvironmentConfig(name=f"verifiers:{module}", args=["num_tasks=4"], max_turns=2)
    make_env, stop = environment_from_config(env)
    row = environment_rows(env)[0][0]
    tok = ascii_chat_tokenizer(CHATML)
    engine = MultiTurnEngine(ScriptedEngine(tok, [row["answer"]]), tok, make_env, max_turns=2)
    prompt = encode_prompt(tok, row["prompt"], chat=True)
    batch = engine.generate([prompt], 1, SamplingParams(max_new_tokens=40), samples=[row])
    (record,) = batch.tools
    assert record.env_reward == 0.0 and record.metrics == {}
    assert record.failure is not None and "ZeroDivisionError" in (record.failure.traceback or "")


def write_module(path: Path, body: str) -> Path:
    head = f"import sys\nsys.path.insert(0, {str(EXAMPLE.parent)!r})\n"
    head += "import verifiers.v1 as vf\nimport verifiers_env as base\n"
    path.write_text(head + textwrap.dedent(body))
    return path


def test_a_plain_taskset_is_one_turn_and_a_stop_ends_the_exchange(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    plain = write_module(
        tmp_path / "plain_taskset.py", 'Tasks = base.HintedAdditionTaskset\n__all__ = ["Tasks"]\n'
    )
    _, make_env, _ = make(f"verifiers:{plain}")  # no Env of its own: verifiers' SingleAgentEnv
    (only,) = play(make_env, {"prompt": "2+2=", "answer": "4"}, ["5"])
    assert only.done and only.reward == 0.0 and only.metrics["guesses"] == 1.0
    stops = write_module(
        tmp_path / "stopping.py",
        """
        class GivesUp(base.HintedAddition):
            @vf.stop
            async def gave_up(self, trace: vf.Trace) -> bool:
                return "give up" in trace.last_reply

        class StopTaskset(
            base.HintedAdditionTaskset, vf.Taskset[GivesUp, base.HintedAdditionConfig]
        ):
            pass

        HintsEnv = base.HintsEnv
        __all__ = ["StopTaskset", "HintsEnv"]
        """,
    )
    _, make_env, _ = make(f"verifiers:{stops}")
    (gave_up,) = play(make_env, {"prompt": "2+2=", "answer": "4"}, ["I give up: 5"])
    assert gave_up.done and gave_up.reward == 0.0 and gave_up.metrics["guesses"] == 1.0
    hint, _ = play(make_env, {"prompt": "2+2=", "answer": "4"}, ["5", "4"])
    assert hint.observation == "lower\n2+2="
