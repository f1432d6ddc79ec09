"""`rlvr estimate` against hand arithmetic."""

import json

import pytest

from rlvr.cli import main
from rlvr.training.memory import GIB

# Llama-2-7B's shape: the hand count below is the published 6.74B.
LLAMA_7B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
H, FF, L, V = 4096, 11008, 32, 32000
N_7B = 2 * V * H + L * (4 * H * H + 3 * H * FF + 2 * H) + H  # embed + head, layers, final norm


@pytest.fixture()
def llama7b(tmp_path):
    d = tmp_path / "llama7b"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA_7B))
    return d


def _report(capsys) -> dict[str, str]:
    out = capsys.readouterr().out
    return {
        line.split("  ")[0].strip(): line.split("  ", 1)[1].strip()
        for line in out.splitlines()
        if "  " in line
    }


def test_7b_full_fine_tuning_in_mixed_precision_needs_16_bytes_per_parameter(llama7b, capsys):
    assert N_7B == 6_738_415_616
    assert main(["estimate", f"model.name_or_path={llama7b}", "--precision", "bf16-mixed"]) == 0
    r = _report(capsys)
    assert r["parameters"].endswith(f"({N_7B:,})")
    assert r["bytes/trainable param"] == "16.0"
    assert r["weights"] == f"{N_7B * 4 / GIB:.2f} GiB"  # fp32 master weights
    assert r["gradients"] == f"{N_7B * 4 / GIB:.2f} GiB"
    assert r["optimizer"] == f"{N_7B * 8 / GIB:.2f} GiB"  # two fp32 Adam moments
    assert r["reference"] == "0.0 MiB"  # beta = 0 by default: no reference model
    # 16 bytes x 6.74B = 107.8 GB before activations and the KV cache
    assert 107.8e9 < 16 * N_7B < 107.9e9


def test_reference_lora_fsdp_and_kv_cache_follow_the_formulas(llama7b, capsys):
    base = ["estimate", f"model.name_or_path={llama7b}", "--precision", "bf16"]
    assert main([*base, "algorithm.kl_coef=0.1", "--world-size", "8", "--fsdp"]) == 0
    r = _report(capsys)
    assert r["bytes/trainable param"] == "8.0"  # bf16 weights, grads and moments
    assert r["weights"] == f"{N_7B * 2 / 8 / GIB:.2f} GiB"
    assert r["reference"] == f"{N_7B * 2 / 8 / GIB:.2f} GiB"
    # KV cache: 2 (K,V) x layers x kv heads x head dim x (512 + 64) tokens x 128/8 rows x 2 B
    kv = 2 * L * 32 * 128 * (512 + 64) * (128 // 8) * 2
    assert r["kv_cache"] == f"{kv / GIB:.2f} GiB"

    assert main([*base, "algorithm.kl_coef=0.1", "model.lora_rank=16"]) == 0
    r = _report(capsys)
    lora = L * 16 * (4 * (H + H) + 2 * (H + FF) + (FF + H))  # q,k,v,o + gate,up + down
    assert r["trainable"].endswith(f"({lora:,})")
    assert r["reference"] == "0.0 MiB"  # the adapter-disabled policy is the reference
    # peft keeps the adapters in fp32 over the bf16 base: fp32 moments
    assert r["optimizer"] == f"{lora * 8 / 2**20:.1f} MiB"


def test_bad_arguments_are_one_line_errors(capsys, tmp_path):
    assert main(["estimate", "--world-size", "0"]) == 2
    assert "--world-size" in capsys.readouterr().err
    assert main(["estimate", f"model.name_or_path={tmp_path}"]) == 2
    assert "config.json" in capsys.readouterr().err


def test_lora_count_equals_what_peft_trains(tiny_model_dir):
    import torch
    from transformers import AutoConfig

    from rlvr.config import ModelConfig
    from rlvr.models.loading import load_model
    from rlvr.models.lora import trainable_parameters
    from rlvr.training.memory import lora_trainable

    cfg = ModelConfig(name_or_path=str(tiny_model_dir), lora_rank=4)
    model = load_model(cfg, torch.device("cpu"), torch.float32, train=True)
    config = AutoConfig.from_pretrained(tiny_model_dir)
    assert lora_trainable(config, 4, ["all-linear"]) == trainable_parameters(model)[0]
    assert lora_trainable(config, 4, ["q_proj", "v_proj"]) < trainable_parameters(model)[0]
