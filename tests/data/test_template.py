"""data.prompt_template: plain templates around every prompt of any task."""

import random

import pytest

from rlvr.config import DataConfig, load_config
from rlvr.data.registry import build_task
from rlvr.errors import ConfigError, DataError


def test_template_wraps_train_and_heldout_prompts_and_keeps_the_raw_prompt():
    task = build_task(DataConfig(prompt_template="Q: {prompt}\nsource={source}\nA:"))
    sample = task.sample_train(random.Random(0))
    raw = sample["raw_prompt"]
    assert sample["prompt"] == f"Q: {raw}\nsource=addition\nA:"
    assert raw.endswith("=") and sample["answer"] == str(eval(raw[:-1]))
    held = task.heldout(3)
    assert [s["prompt"] for s in held] == [
        f"Q: {s['raw_prompt']}\nsource=addition\nA:" for s in held
    ]
    # The task's own methods see the original prompt: demonstrations still parse it.
    assert task.demonstration(sample).startswith("<think>")


def test_template_forwards_curriculum_hooks_and_leaves_missing_ones_missing():
    task = build_task(
        DataConfig(task="arithmetic", difficulty="linear", max_level=3, prompt_template="{prompt}")
    )
    task.on_step(2, 3)
    assert task.metrics() == {"data/level": 3.0}
    plain = build_task(DataConfig(prompt_template="{prompt}"))
    assert not hasattr(plain, "on_step") and not hasattr(plain, "observe")


@pytest.mark.parametrize(
    "template, message",
    [
        ("no placeholder", "must contain {prompt}"),
        ("{prompt} {answer}", "would put the reference into the prompt"),
        ("{prompt} {", "write literal braces"),
        ("{prompt} {a.b}", "plain field name"),
    ],
)
def test_bad_templates_are_config_errors_when_the_config_loads(template, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [f"data.prompt_template={template}"])


def test_a_field_the_sample_lacks_is_a_data_error_naming_the_sample():
    task = build_task(DataConfig(prompt_template="{prompt} ({topic})"))
    with pytest.raises(DataError, match="has no field 'topic'"):
        task.heldout(1)


@pytest.mark.parametrize("field", ["test", "test_list", "expected", "canonical_solution"])
def test_templates_naming_a_verifiers_reference_are_refused(field):
    from rlvr.data.template import check_template

    with pytest.raises(ConfigError, match="reference"):
        check_template("{prompt} {" + field + "}")


def test_the_documented_examples_put_real_newlines_into_the_prompt(tmp_path):
    """The module docstring's command line and config file, parsed exactly as written (a
    shell word split, then the override; the YAML block, then the file)."""
    import shlex
    import textwrap

    import rlvr.data.template

    doc = rlvr.data.template.__doc__
    (command,) = [line.strip() for line in doc.splitlines() if "rlvr train" in line]
    words = shlex.split(command)
    assert words[:2] == ["rlvr", "train"]
    from_cli = load_config(None, words[2:]).data.prompt_template

    blocks = [b for b in doc.split("\n\n") if b.startswith("    data:")]
    assert len(blocks) == 1
    path = tmp_path / "template.yaml"
    path.write_text(textwrap.dedent(blocks[0]) + "\n")
    from_file = load_config(path).data.prompt_template

    for template in (from_cli, from_file):
        assert template.startswith("Question: {prompt}\n") and "\\" not in template
        assert template.count("\n") == 2
    assert from_cli == from_file
    task = build_task(DataConfig(prompt_template=from_cli))
    sample = task.sample_train(random.Random(0))
    assert sample["prompt"].splitlines()[0] == f"Question: {sample['raw_prompt']}"


def test_an_unquoted_backslash_n_stays_as_written():
    """Without the YAML double quotes the text is taken as written (docs/data.md)."""
    cfg = load_config(None, [r"data.prompt_template=Q: {prompt}\nA:"])
    assert cfg.data.prompt_template == "Q: {prompt}\\nA:"
