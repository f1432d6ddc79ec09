"""TextArena games through `environment.name=textarena:...`: docs/examples/textarena_game.py
(written with TextArena's public API only) played by hand, the rows of seeds that
`data.task=environment` trains on, a built-in game, errors as one-line config errors, every
game's own random state, the learner's log-probs equal to the sampler's, and training through
the CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from rlvr.config import EnvironmentConfig
from rlvr.environments import registry
from rlvr.environments.adapters.textarena import EVAL_SEED_BASE, factory, game_seed
from rlvr.errors import ConfigError
from rlvr.rollout import SamplingParams
from rlvr.rollout.multi_turn import MultiTurnEngine
from tests.conftest import assert_token_exact
from tests.rollout.test_multi_turn import CHATML, ScriptedEngine, ascii_chat_tokenizer

ta = pytest.importorskip("textarena")
from textarena.envs.registration import ENV_REGISTRY  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = f"{REPO}/docs/examples/textarena_game.py:SumGuess-v0"
SECTION = EnvironmentConfig(name=f"textarena:{EXAMPLE}", max_turns=3)


@pytest.fixture
def make_game():
    return factory(EXAMPLE, SECTION, {"train_seeds": 4, "eval_seeds": 2})


def test_the_example_game_by_hand(make_game):
    row = make_game.rows("train")[0]
    assert row == {"id": "SumGuess-v0-seed-0", "prompt": row["prompt"], "seed": 0}
    a, b = map(int, row["prompt"].rstrip("=").split("+"))
    game = make_game()
    assert game.reset(row) is None  # the row's prompt is the game's first observation
    low = game.step(f"<think>a guess</think>{a + b - 1}")
    assert (low.observation, low.role, low.done) == (f"\nhigher\n{row['prompt']}", "user", False)
    assert low.reward == 0.0 and low.metrics == {"finished": 0.0, "win": 0.0}
    won = game.step(str(a + b))
    assert (won.reward, won.done, won.observation) == (1.0, True, None)
    assert won.metrics == {"finished": 1.0, "win": 1.0, "invalid_move": 0.0, "turn_count": 2.0}
    game.reset(row)  # a reset starts a new game
    lost = game.step("no idea")
    assert lost.done and lost.reward == 0.0 and lost.metrics["invalid_move"] == 1.0
    game.reset(row)
    for guess in (1, 2):
        assert not game.step(str(guess)).done
    out = game.step("3")
    assert out.done and out.reward == 0.0 and out.metrics["turn_count"] == 3.0


def test_rows_are_reproducible_seeds_and_held_out_seeds_are_others(make_game):
    train, heldout = make_game.rows("train"), make_game.rows("eval")
    assert [r["seed"] for r in train] == [0, 1, 2, 3]
    assert [r["seed"] for r in heldout] == [EVAL_SEED_BASE, EVAL_SEED_BASE + 1]
    assert make_game.rows("train") == train  # the same games on every call and every run
    assert len({r["prompt"] for r in train}) == 4
    # a sample of another task: a seed made from it, the game's first observation returned
    sample = {"id": "addition-3d-347+285", "prompt": "347+285=", "answer": "632"}
    assert game_seed(sample) == game_seed(dict(sample)) != game_seed({**sample, "id": "x"})
    first = make_game().reset(sample)
    assert first == make_game().reset(sample) and first.endswith("=")


def test_a_built_in_game_shows_only_the_new_messages_and_formats_actions():
    make = factory("GuessTheNumber-v0", SECTION, {"max_turns": 4})
    game = make()
    first = game.reset({"seed": 3, "prompt": "play"})
    assert first.startswith("You are Player 0. You are playing Guess The Number.")
    assert "within 4 turns" in first  # environment.args reach textarena.make
    out = game.step("10")  # ActionFormattingWrapper makes it [10]
    assert out.observation in ("\nThe target number is higher.", "\nThe target number is lower.")
    again = make()  # the same seed, the same number
    again.reset({"seed": 3, "prompt": "play"})
    assert again.step("[10]").observation == out.observation


class DrawsEachStep(ta.Env):
    """Says a number drawn from the module-level random generator after every move."""

    def reset(self, num_players, seed=None):
        self.state = ta.SinglePlayerState(num_players=num_players, seed=seed, max_turns=5)
        self.state.reset(game_state={}, player_prompt_function=lambda **_: "go")

    def step(self, action):
        if action == "boom":
            raise RuntimeError("the game broke")
        self.state.add_observation(
            message=str(random.random()), observation_type=ta.ObservationType.GAME_MESSAGE
        )
        return self.state.step()


class NeedsTwo(ta.Env):
    def __init__(self, depth: int = 1):
        if depth < 0:
            raise ValueError("depth must be >= 0")

    def reset(self, num_players, seed=None):
        self.state = ta.TwoPlayerState(num_players=num_players, seed=seed)

    def step(self, action):
        return self.state.step()


@pytest.fixture
def registered():
    games = {"RlvrDraws-v0": DrawsEachStep, "RlvrTwo-v0": NeedsTwo}
    for game_id, cls in games.items():
        ta.register(id=game_id, entry_point=cls)
    yield
    for game_id in games:
        del ENV_REGISTRY[game_id]


def test_every_game_draws_from_its_own_random_state(registered):
    make = factory("RlvrDraws-v0", SECTION, {})
    alone = make()
    alone.reset({"seed": 7, "prompt": "go"})
    expected = [alone.step("m").observation for _ in range(3)]
    a, b = make(), make()
    a.reset({"seed": 7, "prompt": "go"})
    b.reset({"seed": 8, "prompt": "go"})
    outer = random.getstate()
    seen = []
    for _ in range(3):  # interleaved with another game, as parallel rows step
        seen.append(a.step("m").observation)
        b.step("m")
    assert seen == expected and random.getstate() == outer


def test_errors_are_one_line_config_errors_at_factory_time(registered, tmp_path):
    for ref, settings, match in [
        ("NoSuchGame-v0", {}, "textarena has no environment 'NoSuchGame-v0'"),
        ("RlvrTwo-v0", {}, r"reset\(num_players=1\) failed: .*has to be 2"),
        ("GuessTheNumber-v0", {"colour": "red"}, r"environment.args=\[colour=red\].*colour"),
        ("RlvrTwo-v0", {"depth": -1}, "ValueError: depth must be >= 0"),
        ("no_such_module:Game-v0", {}, "cannot import module 'no_such_module'"),
        (f"{tmp_path}/missing.py:Game-v0", {}, "not found"),
    ]:
        with pytest.raises(ConfigError, match=f"environment.name: textarena:.*{match}") as info:
            factory(ref, SECTION, settings)
        assert "\n" not in str(info.value)
    for bad in (0, "many", 1.5):
        with pytest.raises(ConfigError, match="environment.args: train_seeds="):
            factory("GuessTheNumber-v0", SECTION, {"train_seeds": bad})


def test_a_step_that_raises_fails_its_row_with_reward_0(registered):
    tok = ascii_chat_tokenizer(CHATML)
    make = factory("RlvrDraws-v0", SECTION, {})
    engine = MultiTurnEngine(ScriptedEngine(tok, ["boom"]), tok, make, max_turns=2)
    batch = engine.generate(
        [[5]], 2, SamplingParams(max_new_tokens=40), samples=[{"seed": 1, "prompt": "go"}]
    )
    assert all(t.failure is not None and t.env_reward == 0.0 for t in batch.tools)
    assert "the game broke" in batch.tools[0].failure.error


def test_learner_logprobs_match_the_samplers_on_every_sampled_token(make_game):
    """The embedded model playing the example's games: at every sampled position the update's
    log-prob equals the sampler's; the game's messages are inserted masked out (mask 0,
    log-prob 0), exactly the tokens of their text."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.embedded import embedded_model_path
    from rlvr.rollout import FastEngine

    path = embedded_model_path()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    assert not tok.chat_template  # the game's messages are plain text for this model
    engine = MultiTurnEngine(FastEngine(model, tok), tok, make_game, max_turns=3)
    samples = make_game.rows("train")[:2]
    prompts = [tok.encode(s["prompt"], add_special_tokens=False) for s in samples]
    gen = torch.Generator().manual_seed(0)
    batch = engine.generate(
        prompts, 3, SamplingParams(max_new_tokens=96), generator=gen, samples=samples
    )
    assert not any(t.failure for t in batch.tools)
    assert any(t.turns > 1 for t in batch.tools), "no hint was shown: the test checks nothing"
    assert_token_exact(model, tok, batch, observations=True)


def test_the_example_trains_the_embedded_model_on_its_games_through_the_cli(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_FACTORIES", {})
    out = tmp_path / "run"
    args = ["train", "--quiet", "--output-dir", str(out), "data.task=environment"]
    args += [
        f"environment.name=textarena:{EXAMPLE}",
        "environment.args=[train_seeds=8,eval_seeds=2]",
    ]
    args += ["environment.max_turns=3", "reward.verifier=environment", "training.steps=2"]
    args += ["rollout.prompts_per_step=2", "rollout.group_size=2", "eval.size=2"]
    args += ["eval.t1_samples=1", "logging.samples_every=1"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward_mean" in r]
    assert len(steps) == 2
    for step in steps:
        assert 0.0 <= step["env/win"] <= 1.0 and 0.0 <= step["env/finished"] <= 1.0
        assert step["environment_failures"] == 0 and step.get("verifier_failures", 0) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "env/win" in summary["eval_after"]
    train = {r["prompt"] for r in make_rows(8, "train")}
    samples = [json.loads(line) for line in (out / "samples/step-1.jsonl").read_text().splitlines()]
    for sample in samples:
        assert sample["prompt"] in train
        if sample["env_metrics"].get("finished"):  # the game ended and scored the row
            assert sample["reward"] == sample["env_metrics"]["win"]


def make_rows(n: int, split: str) -> list[dict]:
    return factory(EXAMPLE, SECTION, {"train_seeds": n, "eval_seeds": 2}).rows(split)


def test_the_docs_listing_is_the_example_file():
    page = (REPO / "docs/environments/textarena.md").read_text()
    listing = page.split("<!-- docs-test: skip the listing", 1)[1].split("```python\n", 1)[1]
    assert listing.split("\n```", 1)[0] in (REPO / "docs/examples/textarena_game.py").read_text()
