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
