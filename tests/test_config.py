from pathlib import Path

import pytest

from rlvr.config import Config, all_keys, load_config
from rlvr.errors import ConfigError


def test_defaults_validate_and_cover_every_section():
    cfg = load_config()
    assert isinstance(cfg, Config)
    sections = {k.split(".")[0] for k in all_keys()}
    assert {
        "model",
        "data",
        "reward",
        "rollout",
        "algorithm",
        "optimizer",
        "training",
        "eval",
        "logging",
        "checkpoint",
    } <= sections


def test_yaml_then_overrides_win(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("rollout:\n  group_size: 4\n  temperature: 0.7\noptimizer:\n  lr: 1.0e-5\n")
    cfg = load_config(f, ["rollout.group_size=16", "optimizer.lr=3e-4", "rollout.stop=['</a>']"])
    assert cfg.rollout.group_size == 16
    assert cfg.rollout.temperature == 0.7
    assert cfg.optimizer.lr == pytest.approx(3e-4)  # '3e-4' is a YAML 1.1 string, still a float
    assert cfg.rollout.stop == ["</a>"]


def test_int_accepted_where_float_expected_but_not_the_reverse():
    assert load_config(None, ["rollout.temperature=1"]).rollout.temperature == 1.0
    with pytest.raises(ConfigError, match=r"^rollout.group_size: expected int, got 2.5$"):
        load_config(None, ["rollout.group_size=2.5"])


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "rollout.groupsize=4",
            "unknown config key 'rollout.groupsize'; did you mean 'rollout.group_size'?",
        ),
        ("optimzer.lr=1e-5", "unknown config key 'optimzer.lr'; did you mean 'optimizer.lr'?"),
        ("optimizer.lr=-1", "optimizer.lr: must be > 0.0, got -1.0"),
        ("rollout.group_size=abc", "rollout.group_size: expected int, got 'abc'"),
        ("algorithm.advantage=grpoo", "did you mean 'grpo'?"),
        ("rollout.top_p=1.5", "rollout.top_p: must be <= 1.0, got 1.5"),
        ("algorithm.dual_clip_c=0.5", "algorithm.dual_clip_c: must be > 1.0"),
        ("rollout.group_size=1", "rollout.group_size: grpo compares completions within a group"),
        ("training.mini_batch_size=12", "training.mini_batch_size: must divide"),
        ("noequals", "expected key=value"),
    ],
)
def test_bad_values_give_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    text = str(info.value)
    assert message in text
    assert "\n" not in text


def test_unknown_key_in_yaml_is_named_with_its_section(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("algorithm:\n  kl_coeff: 0.1\n")
    with pytest.raises(
        ConfigError,
        match="unknown config key 'algorithm.kl_coeff'; did you mean 'algorithm.kl_coef'",
    ):
        load_config(f)


def test_missing_and_malformed_yaml_files(tmp_path: Path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout: [1, 2\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(top)


def test_group_size_one_is_fine_for_batch_normalised_reinforce_pp():
    cfg = load_config(None, ["algorithm.advantage=reinforce_pp", "rollout.group_size=1"])
    assert cfg.rollout.group_size == 1


def test_every_example_config_validates():
    examples = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))
    assert len(examples) >= 6
    for path in examples:
        if path.stem.startswith("sft"):
            from rlvr.training.sft import SFTConfig

            load_config(path, schema=SFTConfig)
        else:
            load_config(path)


def test_every_example_pipeline_parses_and_resolves():
    from rlvr.pipeline.runner import Pipeline
    from rlvr.pipeline.spec import load_pipeline

    examples = sorted((Path(__file__).parent.parent / "examples" / "pipelines").glob("*.yaml"))
    assert examples
    for path in examples:
        Pipeline(load_pipeline(path), Path("/nonexistent"))


def test_a_dataset_task_needs_a_path():
    with pytest.raises(ConfigError, match="data.path: required when data.task is 'dataset'"):
        load_config(None, ["data.task=dataset"])
    cfg = load_config(None, ["data.task=dataset", "data.path=prompts.jsonl"])
    assert cfg.data.path == "prompts.jsonl"
