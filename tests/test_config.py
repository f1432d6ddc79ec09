import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.config import Config, all_keys, config_warnings, load_config
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
            from rlvr.sft.trainer import SFTConfig

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


# ---------------------------------------------------------------------------------------------
# How an override's value is read: by the key's type


@pytest.mark.parametrize(
    "text",
    [
        "Answer format: <answer>N</answer>",  # YAML would read a mapping
        "Reply #1 only",  # YAML would drop ' #1 only' as a comment
        "true",  # YAML would read a bool
        "0123",  # YAML would read the int 123
        "- a list item?",
        "[not, a, list]",
        "  spaces kept  ",
    ],
)
def test_a_text_key_takes_the_override_as_written(text):
    cfg = load_config(None, [f"data.system_prompt={text}", f"model.name_or_path={text}"])
    assert cfg.data.system_prompt == text
    assert cfg.model.name_or_path == text


def test_a_text_key_reads_nulls_and_quoted_values_as_yaml():
    def system(value):
        return load_config(None, [f"data.system_prompt={value}"]).data.system_prompt

    assert system("null") is None and system("~") is None  # 'str or null': null is null
    assert system("'null'") == "null" and system('"~"') == "~"
    assert system("") == ""
    assert system("'a: b'") == "a: b"
    assert system("'it''s'") == "it's"  # YAML single quotes: '' is a quote, no escapes
    assert system(r"'Q:\nA:'") == r"Q:\nA:"
    assert system(r'"Q:\nA:\t\"x\" \\"') == 'Q:\nA:\t"x" \\'  # double quotes unescape
    assert system("'a' and 'b'") == "'a' and 'b'"  # not one quoted scalar: as written
    assert system("'a' #b'") == "'a' #b'"  # a quoted scalar, then a YAML comment: as written
    assert system("'!!int x'") == "!!int x"
    # A plain 'str' key: 'null' is text, not a missing value.
    assert load_config(None, ["model.name_or_path=null"]).model.name_or_path == "null"
    with pytest.raises(ConfigError, match="^data.task: expected one of .*got 'gym: x'"):
        load_config(None, ["data.task=gym: x"])


def test_a_text_key_in_a_yaml_file_is_yaml(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text('data:\n  system_prompt: "Answer format: <answer>N</answer>"\n')
    assert load_config(f).data.system_prompt == "Answer format: <answer>N</answer>"
    over = load_config(f, ["data.system_prompt=Format: x"])
    assert over.data.system_prompt == "Format: x"


def test_a_list_of_text_splits_at_commas_outside_brackets_and_quotes():
    cfg = load_config(
        None,
        [
            "data.gym_config=[min_terms=2,operators=[+, -], x={a: 1, b: 2}]",
            r"""rollout.stop=['</a>', "\n\n", 'a, b', "say \"hi, there\"", x: y,]""",
            "logging.report_to=[]",
        ],
    )
    assert cfg.data.gym_config == ["min_terms=2", "operators=[+, -]", "x={a: 1, b: 2}"]
    assert cfg.rollout.stop == ["</a>", "\n\n", "a, b", 'say "hi, there"', "x: y"]
    assert cfg.logging.report_to == []
    # Not one bracketed list: one item, as written.
    assert load_config(None, ["rollout.stop=</a>"]).rollout.stop == ["</a>"]
    assert load_config(None, ["rollout.stop=[a, [b]"]).rollout.stop == ["[a, [b]"]
    with pytest.raises(ConfigError, match=r"^logging.report_to\[1\]: expected one of"):
        load_config(None, ["logging.report_to=[jsonl, 'wandb ']"])


def test_other_keys_still_read_yaml():
    cfg = load_config(None, ["eval.budgets=[64, 128]", "rollout.temperature=7e-1"])
    assert cfg.eval.budgets == [64, 128] and cfg.rollout.temperature == pytest.approx(0.7)
    assert load_config(None, ["algorithm.dual_clip_c=null"]).algorithm.dual_clip_c is None
    with pytest.raises(ConfigError) as info:
        load_config(None, ["training.steps=a: b"])  # text, not the mapping {'a': 'b'}
    assert str(info.value) == "training.steps: expected int, got 'a: b'"
    with pytest.raises(ConfigError, match=r"eval.budgets\[1\]: expected int, got 'x'"):
        load_config(None, ["eval.budgets=[1, x]"])


def test_parse_override_without_types_reads_yaml():
    from rlvr.config import parse_override

    assert parse_override("rl1.rollout.group_size=4") == ("rl1.rollout.group_size", 4)
    assert parse_override("a.b=[x, y]") == ("a.b", ["x", "y"])
    assert parse_override("a.b={x: 1}") == ("a.b", {"x": 1})
    assert parse_override("a.b=Format: x") == ("a.b", "Format: x")
    assert parse_override("a.b=[x, [y]") == ("a.b", "[x, [y]")


def test_deeply_nested_override_values_are_text_without_a_yaml_parse():
    """PyYAML takes seconds on hundreds of nested brackets; no config value nests that deep."""
    from rlvr.config import parse_override

    deep = "[" * 700 + "]" * 700
    assert parse_override(f"eval.budgets={deep}") == ("eval.budgets", deep)
    assert parse_override(f"a={'[' * 32}{']' * 32}")[1] != "[" * 32 + "]" * 32  # YAML still
    with pytest.raises(ConfigError, match=r"^eval.budgets\[0\]: expected int, got '\[\[\["):
        load_config(None, [f"eval.budgets={deep}"])


@pytest.mark.parametrize(
    "text, items",
    [
        ("[]", []),
        ("[ ]", []),
        ("[a]", ["a"]),
        ("[a,]", ["a"]),
        (" [a , b] ", ["a", "b"]),
        ("[a=[1, 2], b={c: [3, 4]}]", ["a=[1, 2]", "b={c: [3, 4]}"]),
        ("['a, b', \"c, d\"]", ["'a, b'", '"c, d"']),
        (r'["a\", b", c]', [r'"a\", b"', "c"]),
        (r'["a\\", b]', [r'"a\\"', "b"]),
        ("['it''s, ok', x]", ["'it''s, ok'", "x"]),
        ("a, b", None),
        ("[a", None),
        ("[a]]", None),
        ("[a, [b]", None),
        ("[a, {b]}", None),
        ("[a, 'b]", None),
    ],
)
def test_split_flow_list(text, items):
    from rlvr.config.fields import split_flow_list

    assert split_flow_list(text) == items


# ---------------------------------------------------------------------------------------------
# The modules behind rlvr.config


def test_importing_the_config_imports_neither_torch_nor_the_data_package():
    code = (
        "import sys, rlvr.config\n"
        "assert 'torch' not in sys.modules, 'torch'\n"
        "assert not [m for m in sys.modules if m.startswith('rlvr.data')], 'rlvr.data'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_config_modules_import_only_errors_algorithm_names_and_each_other():
    src = Path(__file__).parent.parent / "src" / "rlvr" / "config"
    allowed = {"rlvr.errors", "rlvr.algorithms.names", "rlvr.config.fields", "rlvr.config.checks"}
    allowed |= {"rlvr.config.tree", "rlvr.config.rollout", "rlvr.config.trl", "rlvr.config.critic"}
    for name in sorted(p.name for p in src.glob("*.py")):
        text = (src / name).read_text(encoding="utf-8")
        assert len(text.splitlines()) < 600, name
        imported = set(re.findall(r"^\s*(?:from|import) (rlvr[\w.]*)", text, re.M))
        assert imported <= allowed | {"rlvr.config"}, f"{name}: {imported - allowed}"


def test_every_name_imported_from_rlvr_config_still_is_there():
    import rlvr.config

    for name in (
        "Config AlgorithmConfig CheckpointConfig DataConfig DistributedConfig EvalConfig "
        "LoggingConfig ModelConfig OptimizerConfig RewardConfig RolloutConfig TrainingConfig "
        "load_config dump_yaml to_dict describe all_keys parse_override read_yaml validate "
        "validate_model type_name option config_warnings"
    ).split():
        assert hasattr(rlvr.config, name), name


TEMPLATES = [
    "Q: {prompt}\nA:",
    "{prompt} {id} {{literal}}",
    "no prompt field",
    "{prompt} {answer}",
    "{prompt} {tests}",
    "{prompt!r}",
    "{prompt:>5}",
    "{prompt} {0}",
    "{prompt} {x.y}",
    "{prompt",
    "{prompt}}",
]


@pytest.mark.parametrize("template", TEMPLATES)
def test_a_template_is_refused_alike_at_load_and_when_a_task_is_templated(template):
    from rlvr.data.template import TemplatedTask

    def outcome(build):
        try:
            build()
            return "ok"
        except ConfigError as e:
            return str(e)

    at_load = outcome(lambda: load_config(None, [f"data.prompt_template={template!r}"]))
    assert at_load == outcome(lambda: TemplatedTask(object(), template))
    assert (at_load == "ok") == (template in ("Q: {prompt}\nA:", "{prompt} {id} {{literal}}"))


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "algorithm.policy_loss=cispoo",
            "algorithm.policy_loss: expected one of clip, cispo, gmpo",
        ),
        (
            "algorithm.clip_cov_lb=6",
            "algorithm.clip_cov_lb: must be <= algorithm.clip_cov_ub = 5.0",
        ),
        ("algorithm.kl_cov_ratio=0", "algorithm.kl_cov_ratio: must be > 0.0"),
        ("algorithm.clip_cov_ratio=2", "algorithm.clip_cov_ratio: must be <= 1.0"),
        ("algorithm.cispo_clip_high=-1", "algorithm.cispo_clip_high: must be >= 0.0"),
        ("algorithm.gmpo_clip_low=-1", "algorithm.gmpo_clip_low: must be >= 0.0"),
        ("algorithm.kl_cov_coef=-1", "algorithm.kl_cov_coef: must be >= 0.0"),
        ("algorithm.token_correction=clip", "algorithm.token_correction: expected one of tis"),
        ("algorithm.mis_cap=0.5", "algorithm.mis_cap: keeps the sequences whose ratio lies"),
        ("algorithm.mis_cap=1", "so it must be > 1 (or 0: off), got 1"),
    ],
)
def test_bad_policy_loss_settings_give_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_icepop_needs_a_band_around_one():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["algorithm.token_correction=icepop", "algorithm.tis_cap=1"])
    assert str(info.value).startswith("algorithm.tis_cap: token_correction=icepop keeps")
    cfg = load_config(None, ["algorithm.token_correction=icepop", "algorithm.tis_cap=5"])
    assert cfg.algorithm.token_correction == "icepop"


# ---------------------------------------------------------------------------------------------
# Options without effect


def test_the_default_config_gives_no_warning():
    assert config_warnings(load_config()) == []


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (
            ["algorithm.advantage=rloo", "algorithm.std=sample"],
            "algorithm.std=sample has no effect: algorithm.advantage=rloo does not read it "
            "(read by grpo, reinforce_pp, reinforce_pp_baseline)",
        ),
        (["algorithm.advantage=dr_grpo", "algorithm.eps=0.1"], "algorithm.eps=0.1 has no effect"),
        (
            ["algorithm.policy_loss=cispo", "algorithm.dual_clip_c=3"],
            "algorithm.dual_clip_c=3.0 has no effect: algorithm.policy_loss=cispo does not read "
            "it (read by clip)",
        ),
        (
            ["algorithm.policy_loss=kl_cov", "algorithm.clip_ratio_high=0.28"],
            "algorithm.clip_ratio_high=0.28 has no effect: algorithm.policy_loss=kl_cov does not "
            "read it (read by clip, clip_cov)",
        ),
        (["algorithm.policy_loss=gmpo", "algorithm.ratio_level=sequence"], "ratio_level=sequence"),
        (["algorithm.cispo_clip_high=2"], "algorithm.policy_loss=clip does not read it"),
        (["algorithm.kl_cov_coef=0.5"], "(read by kl_cov)"),
        (
            ["algorithm.tis_cap=3"],
            "algorithm.tis_cap=3.0 has no effect: it corrects for a sampler other than the "
            "learner and the sampler is the learner itself",
        ),
        (["algorithm.mis_cap=2"], "algorithm.mis_cap=2.0 has no effect: it corrects for"),
        (["rollout.max_logprob_drift=0.5"], "rollout.engine=fast samples with the learner's"),
        (["rollout.vllm_kv_cache_gb=4"], "rollout.vllm_kv_cache_gb=4.0 has no effect"),
        (["algorithm.max_sampling_rounds=5"], "algorithm.dynamic_sampling is false"),
        (["algorithm.kl_estimator=k1"], "algorithm.kl_estimator=k1 has no effect: algorithm.kl_c"),
        (["eval.budgets=[64, 128]"], "eval.budgets=[64, 128] has no effect: the budget accu"),
        (["eval.k=8", "eval.t1_samples=8"], "eval.t1_samples=8 has no effect: max(eval.k"),
        (["eval.size=0", "eval.k=4"], "eval.k=4 has no effect: eval.size=0 evaluates nothing"),
        (["eval.size=0", "eval.every=5"], "eval.every=5 has no effect"),
        (["reward.overlong_penalty_factor=0.5"], "reward.overlong_buffer=0 turns the shaping off"),
        (["reward.timeout_s=30"], "reward.timeout_s=30.0 has no effect: reward.workers=0"),
        (["training.token_budget=0", "training.logprob_chunk=64"], "training.token_budget=0"),
        (["training.token_budget=0", "training.share_prompts=false"], "share_prompts=false"),
        (["rollout.temperature=0", "rollout.top_p=0.9"], "rollout.temperature=0 decodes greedily"),
        (["rollout.temperature=0", "rollout.top_k=5"], "rollout.top_k=5 has no effect"),
        (["optimizer.min_lr_ratio=0.5"], "optimizer.schedule=constant does not decay"),
        (["logging.wandb_project=x"], "logging.wandb_project=x has no effect: logging.report_to"),
        (["model.lora_alpha=32"], "model.lora_alpha=32.0 has no effect: model.lora_rank=0"),
        (["model.lora_target_modules=[q_proj]"], "model.lora_target_modules=[q_proj] has no"),
        (["model.chat_template=never", "data.system_prompt=Be brief."], "data.system_prompt"),
        (["data.countdown_max_value=50"], "only data.task=countdown reads it (data.task=addition)"),
        (["data.task=arithmetic", "data.promote_at=0.5"], "data.difficulty=fixed does not prom"),
        (["data.digits=5", "data.task=countdown"], "data.digits=5 has no effect: only data.ta"),
        (
            [
                "data.task=dataset",
                "data.path=p.jsonl",
                "data.eval_path=e.jsonl",
                "data.eval_fraction=0.2",
            ],
            "data.eval_fraction=0.2 has no effect: data.eval_path is the held-out set",
        ),  # fmt: skip
        (["distributed.rollout_workers=4"], "distributed.ray is false"),
        (["rollout.partial_rollouts=true"], "only an asynchronous schedule"),
        (["rollout.partial_switch_at=4"], "only deterministic partial rollouts"),
        (
            [
                "rollout.partial_rollouts=true",
                "rollout.max_staleness=2",
                "rollout.async_mode=free",
                "rollout.engine=hf",
            ],
            "rollout.engine=hf finish a batch on the weights it started with",
        ),
    ],
)
def test_an_option_without_effect_is_named_once_with_its_value_and_reason(overrides, expected):
    lines = config_warnings(load_config(None, overrides))
    assert len(lines) == 1, lines
    assert expected in lines[0] and "\n" not in lines[0]


@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm.advantage=rloo"],  # std/eps at their defaults
        ["algorithm.std=sample", "algorithm.eps=0.1"],  # grpo reads both
        ["algorithm.policy_loss=clip_cov", "algorithm.clip_ratio_high=0.28"],
        ["algorithm.policy_loss=cispo", "algorithm.cispo_clip_high=2"],
        ["algorithm.tis_cap=3", "rollout.off_policy_steps=1"],
        ["algorithm.tis_cap=3", "algorithm.mis_cap=2", "rollout.engine=vllm"],
        ["rollout.max_logprob_drift=0.5", "rollout.vllm_kv_cache_gb=4", "rollout.engine=vllm"],
        ["algorithm.max_sampling_rounds=5", "algorithm.dynamic_sampling=true"],
        ["algorithm.kl_estimator=k1", "algorithm.kl_coef=0.01"],
        ["eval.budgets=[64]", "eval.k=4"],
        ["reward.overlong_penalty_factor=0.5", "reward.overlong_buffer=16"],
        ["reward.timeout_s=30", "reward.workers=2"],
        ["training.share_prompts=false"],
        ["optimizer.min_lr_ratio=0.5", "optimizer.schedule=cosine"],
        ["logging.wandb_mode=online", "logging.report_to=[jsonl, wandb]"],
        ["model.lora_alpha=32", "model.lora_rank=8"],
        ["data.task=arithmetic", "data.difficulty=adaptive", "data.promote_at=0.5"],
        ["eval.size=0", "eval.every=0", "eval.before=false"],  # turning off what is off
    ],
)
def test_an_option_that_takes_effect_is_not_named(overrides):
    assert config_warnings(load_config(None, overrides)) == []


def test_every_example_config_is_free_of_ineffective_options():
    examples = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))
    for path in examples:
        if not path.stem.startswith("sft"):
            assert config_warnings(load_config(path)) == [], path.name


# --- TRL's names (issue 36) --------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, expected",
    [
        ("rollout.num_generations", "rollout.group_size"),
        ("optimizer.learning_rate", "optimizer.lr"),
        ("rollout.max_completion_length", "rollout.max_new_tokens"),
        ("grpo.beta", "algorithm.kl_coef"),
        ("num_generations", "rollout.group_size"),
        ("training.per_device_train_batch_size", "training.micro_batch_size"),
    ],
)
def test_a_trl_name_suggests_the_rlvr_key_of_the_same_setting(key, expected):
    with pytest.raises(ConfigError, match=rf"did you mean '{re.escape(expected)}'\? \(TRL's"):
        load_config(None, [f"{key}=1"])
    section, _, leaf = key.rpartition(".")  # the same in a YAML file's sections
    tree = {section: {leaf: 1}} if section else {leaf: 1}
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_config(tree=tree, note=lambda _line: None)


def test_a_trl_grpoconfig_yaml_is_translated_with_one_note_per_key(tmp_path):
    path = tmp_path / "grpo.yaml"
    path.write_text(
        "num_generations: 4\n"
        "max_completion_length: 32\n"
        "learning_rate: 1.0e-5\n"
        "beta: 0.04\n"
        "epsilon: 0.2\n"
        "epsilon_high: 0.28\n"
        "loss_type: dapo\n"
        "scale_rewards: group\n"
        "per_device_train_batch_size: 8\n"
        "gradient_accumulation_steps: 2\n"
        "max_steps: 10\n"
        "seed: 7\n"
        "logging_steps: 5\n"
        "output_dir: out\n"
        "report_to: none\n"
        "eval:\n"
        "  size: 8\n"
    )
    notes: list[str] = []
    cfg = load_config(path, ["training.seed=8"], note=notes.append)
    assert cfg.rollout.group_size == 4 and cfg.rollout.max_new_tokens == 32
    assert cfg.optimizer.lr == 1e-5 and cfg.algorithm.kl_coef == 0.04
    assert (cfg.algorithm.clip_ratio_low, cfg.algorithm.clip_ratio_high) == (0.2, 0.28)
    assert cfg.algorithm.loss_aggregation == "token_mean"
    assert (cfg.algorithm.advantage, cfg.algorithm.std, cfg.algorithm.eps) == (
        "grpo",
        "sample",
        1e-4,
    )
    # 8 x 2 completions per optimizer step = TRL's generation batch: 4 prompts, one update
    assert cfg.rollout.prompts_per_step == 4 and cfg.training.micro_batch_size == 8
    assert cfg.training.mini_batch_size == 0 and cfg.training.steps == 10
    assert cfg.training.seed == 8  # an override still wins
    assert cfg.eval.size == 8 and cfg.logging.report_to == ["jsonl"]
    for name in ("num_generations", "beta", "loss_type", "output_dir", "logging_steps"):
        assert sum(f"TRL's {name}" in line for line in notes) == 1, (name, notes)
    assert all("\n" not in line and line.startswith(f"config file {path}") for line in notes)
    assert any("rollout.group_size=4" in line for line in notes)


def test_trl_max_steps_counts_optimizer_steps_and_several_per_generation_make_mini_batches():
    notes: list[str] = []
    tree = {
        "num_generations": 4,
        "per_device_train_batch_size": 4,
        "steps_per_generation": 4,
        "num_iterations": 2,
        "max_steps": 40,
    }
    cfg = load_config(tree=tree, note=notes.append)
    assert cfg.rollout.prompts_per_step == 4  # 16 completions per generation / 4
    assert cfg.training.mini_batch_size == 4 and cfg.training.ppo_epochs == 2
    assert cfg.training.steps == 5  # 40 optimizer steps / (2 passes x 4 mini-batches)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("num_generations: 4\nuse_liger: true\n", "use_liger: neither a section"),
        ("sync_ref_model: true\n", "TRL's sync_ref_model=true: rlvr has no equivalent"),
        ("scale_rewards: batch\n", "TRL's scale_rewards: batch has no rlvr equivalent"),
        ("num_train_epochs: 3\n", "rlvr counts RL steps, not passes over the dataset"),
        ("report_to: [comet_ml]\n", "report_to: comet_ml"),
        ("beta: 0.1\nalgorithm:\n  kl_coef: 0.2\n", "algorithm.kl_coef is set twice"),
        ("steps: 3\n", "did you mean 'training.steps'?"),
    ],
)
def test_a_trl_key_rlvr_cannot_honour_is_a_one_line_error_naming_it(tmp_path, text, expected):
    path = tmp_path / "grpo.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, note=lambda _line: None)
    assert expected in str(info.value) and "\n" not in str(info.value)
    assert str(path) in str(info.value)


def test_a_harmless_trl_key_is_ignored_with_a_note(tmp_path):
    notes: list[str] = []
    cfg = load_config(tree={"push_to_hub": False, "min_p": None, "bf16": True}, note=notes.append)
    assert cfg.model.precision == "bf16-mixed"
    assert any("push_to_hub: ignored" in line for line in notes)
    assert any("min_p: null ignored" in line for line in notes)


def test_data_path_without_data_task_trains_on_the_dataset_and_says_so():
    notes: list[str] = []
    cfg = load_config(None, ["data.path=rows.jsonl"], note=notes.append)
    assert cfg.data.task == "dataset"
    assert notes == [
        "data.path is set, so data.task=dataset (the default task, addition, reads no file)"
    ]
    notes.clear()
    assert load_config(None, ["data.task=dataset", "data.path=r.jsonl"], note=notes.append)
    assert notes == []  # said in full: nothing to note
    explicit = load_config(None, ["data.task=addition", "data.path=r.jsonl"], note=notes.append)
    assert explicit.data.task == "addition" and notes == []  # as asked; config_warnings names it
    assert any("data.path" in w for w in config_warnings(explicit))


@pytest.mark.parametrize("text", ["? \n", "1: 2\nnull: 3\n", "model:\ntop level key: 1\n"])
def test_top_level_keys_that_are_no_names_are_a_one_line_error(tmp_path, text):
    # YAML keys may be null, numbers or hold spaces; none is a section or a TRL name
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "\n" not in str(e.value) and "neither a section" in str(e.value)


@pytest.mark.parametrize("value", [[[]], [["math"]], [["math", True]], [[1, 2]]])
def test_a_yaml_list_that_is_no_python_verifier_is_a_type_error(tmp_path, value):
    """Only a function, or a (function or spec, weight) pair, makes reward.verifier's list a
    value set from Python; YAML's other lists (found by the config fuzzer) are type errors."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"reward": {"verifier": value}}))
    with pytest.raises(ConfigError, match="reward.verifier"):
        load_config(str(path))


def test_learned_reward_and_judge_options_without_one_are_named_as_ineffective():
    lines = config_warnings(load_config(None, ["reward.rm_normalize=batch", "reward.judge_seed=3"]))
    assert any(line.startswith("reward.rm_normalize=batch has no effect") for line in lines)
    assert any(line.startswith("reward.judge_seed=3 has no effect") for line in lines)
    cfg = load_config(None, ["reward.verifier=rm:/runs/rm/final", "reward.rm_normalize=batch"])
    assert config_warnings(cfg) == []
    cfg = load_config(
        None,
        [f"data.mix_path={__file__}", "data.mix_fraction=0.5"]
        + ["reward.mix_verifier=judge:http://127.0.0.1:9/v1", "reward.judge_seed=3"],
    )
    assert not any(line.startswith("reward.judge_seed") for line in config_warnings(cfg))
