"""`rlvr estimate` against hand arithmetic."""

import json

import pytest

from rlvr.cli import main
from rlvr.estimate.memory import GIB

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


def test_stale_rollouts_hold_one_weight_copy_per_step_of_staleness(llama7b, capsys):
    base = ["estimate", f"model.name_or_path={llama7b}", "--precision", "bf16"]
    assert main(base) == 0
    assert _report(capsys)["replica"] == "0.0 MiB"  # on-policy: the engine reads the model
    for k in (1, 3):  # the replica, and K - 1 copies carried by queued batches
        assert main([*base, f"rollout.max_staleness={k}"]) == 0
        assert _report(capsys)["replica"] == f"{k * N_7B * 2 / GIB:.2f} GiB"
    # FSDP: the whole copy evaluation and saving gather into comes on top of the K copies
    fsdp = [*base, "--world-size", "8", "--fsdp"]
    assert main(fsdp) == 0
    assert _report(capsys)["replica"] == f"{N_7B * 2 / GIB:.2f} GiB"
    assert main([*fsdp, "rollout.max_staleness=3"]) == 0
    assert _report(capsys)["replica"] == f"{4 * N_7B * 2 / GIB:.2f} GiB"


def test_bad_arguments_are_one_line_errors(capsys, tmp_path):
    assert main(["estimate", "--world-size", "0"]) == 2
    assert "--world-size" in capsys.readouterr().err
    assert main(["estimate", f"model.name_or_path={tmp_path}"]) == 2
    assert "config.json" in capsys.readouterr().err


def test_lora_count_equals_what_peft_trains(tiny_model_dir):
    import torch
    from transformers import AutoConfig

    from rlvr.config import ModelConfig
    from rlvr.estimate.memory import lora_trainable
    from rlvr.models.loading import load_model
    from rlvr.models.lora import trainable_parameters

    cfg = ModelConfig(name_or_path=str(tiny_model_dir), lora_rank=4)
    model = load_model(cfg, torch.device("cpu"), torch.float32, train=True)
    config = AutoConfig.from_pretrained(tiny_model_dir)
    assert lora_trainable(config, 4, ["all-linear"]) == trainable_parameters(model)[0]
    assert lora_trainable(config, 4, ["q_proj", "v_proj"]) < trainable_parameters(model)[0]


def _saved_bytes(model, packed) -> int:
    """Bytes of the distinct storages autograd keeps for the backward of the packed update's
    forward (parameters excluded)."""
    import torch

    from rlvr.forward.packing import packed_completion_logprobs

    seen: dict[int, int] = {}

    def keep(t):
        storage = t.untyped_storage()
        seen[storage._cdata] = max(seen.get(storage._cdata, 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        packed_completion_logprobs(model, packed, attention="dense")
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    return sum(size for key, size in seen.items() if key not in params)


def _layer_config(layers: int, kv_heads: int):
    """The small Llama layer shape the activation and backward formulas are measured on."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        head_dim=16,
    )


@pytest.mark.parametrize("kv_heads", [2, 4])
def test_activation_formula_matches_what_autograd_saves_per_token_and_layer(kv_heads):
    # The per-layer cost is the difference between a 2-layer and a 1-layer model on the same
    # packed micro-batch (3 prompts of 40 tokens, each with 4 completions of 10).
    import torch
    from transformers import LlamaForCausalLM

    from rlvr.estimate.memory import activation_elements, model_shape
    from rlvr.forward.packing import packed_micro_batches

    torch.manual_seed(0)
    prompts = [p for p in (torch.randint(3, 90, (40,)) for _ in range(3)) for _ in range(4)]
    completions = [torch.randint(3, 90, (10,)) for _ in range(12)]
    (packed,) = packed_micro_batches(
        prompts, completions, range(12), token_budget=4096, max_rows=64, share_prompts=True
    )
    one, two = (_saved_bytes(LlamaForCausalLM(_layer_config(n, kv_heads)), packed) for n in (1, 2))
    per_layer = (two - one) / packed.input_ids.numel() / 4  # fp32 elements per token
    predicted = activation_elements(model_shape(_layer_config(1, kv_heads)))
    assert abs(predicted - per_layer) / per_layer < 0.05, (predicted, per_layer)


@pytest.mark.parametrize("layers", [1, 2])
def test_backward_formula_matches_the_live_memory_the_backward_adds(layers):
    # The peak of the live bytes torch's profiler records (each op's allocations and frees in
    # order) during the backward of the packed update, with the parameters' gradients
    # allocated beforehand: what the backward holds beyond the saved activations.
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import LlamaForCausalLM

    from rlvr.estimate.memory import backward_elements, model_shape
    from rlvr.forward.packing import packed_completion_logprobs, packed_micro_batches

    config = _layer_config(layers, kv_heads=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter)
    prompt = torch.randint(3, 90, (8,))
    completions = [torch.randint(3, 90, (400,)) for _ in range(2)]
    (packed,) = packed_micro_batches(
        [prompt, prompt], completions, [0, 1], token_budget=4096, max_rows=64, share_prompts=True
    )
    for attention in ("dense", "segments"):
        logprobs, _ = packed_completion_logprobs(model, packed, attention=attention)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            logprobs.sum().backward()
        events = sorted(
            (e for e in prof.events() if e.self_cpu_memory_usage),
            key=lambda e: e.time_range.start,
        )
        live = peak = 0
        for event in events:
            live += event.self_cpu_memory_usage
            peak = max(peak, live)
        measured = peak / packed.input_ids.numel() / 4  # fp32 elements per token
        predicted = backward_elements(model_shape(config))
        assert abs(predicted - measured) / measured < 0.1, (attention, predicted, measured)


def _shape_100m():
    """A 100M-parameter Llama-family shape: 10 layers, hidden 512, 8 heads sharing 2 K/V."""
    from rlvr.estimate.memory import ModelShape

    return ModelShape(
        num_parameters=10**8,
        trainable_parameters=10**8,
        num_layers=10,
        hidden_size=512,
        num_kv_heads=2,
        head_dim=64,
        vocab_size=32000,
        num_heads=8,
        intermediate_size=1536,
    )


def test_estimate_takes_the_widest_phase_and_bounds_the_prefill(capsys):
    from rlvr.config import load_config
    from rlvr.estimate.memory import estimate, plan_of

    shape = _shape_100m()
    cfg = load_config(
        None, ["rollout.prompts_per_step=8", "rollout.max_new_tokens=100", "eval.size=0"]
    )
    plan = plan_of(cfg, prompt_tokens=300)
    assert plan.decoded_rows == 64  # rollout.max_batch_size=0: the rows of one step
    parts = estimate(
        shape, plan, precision="fp32", kl_coef=0.0, lora=False, gradient_checkpointing=False
    )
    kv_token = 2 * 10 * 2 * 64 * 4
    assert parts["kv_cache"] == kv_token * 448 * 64  # 300 + 100 rounded up to 64s, 64 rows
    # 8 prompts (64 rows of G = 8) are prefilled at once: 13 would fit in the 4096-token budget
    transient = 2 * 512 + 2 * 512 + 2 * 128 + 3 * 1536
    assert parts["prefill"] == 8 * 300 * (kv_token + transient * 4)
    resident = sum(parts[k] for k in ("runtime", "weights", "optimizer", "reference", "replica"))
    phases = [parts[f"phase_{p}"] for p in ("generation", "evaluation", "update")]
    assert parts["total"] == resident + max(phases)
    assert parts["phase_update"] == sum(
        parts[k] for k in ("gradients", "compute_copy", "activations", "backward", "logits")
    )
    small = plan_of(load_config(None, ["rollout.max_prefill_tokens=600"]), prompt_tokens=300)
    capped = estimate(
        shape, small, precision="fp32", kl_coef=0.0, lora=False, gradient_checkpointing=False
    )
    assert capped["prefill"] == 2 * 300 * (kv_token + transient * 4)


def test_estimate_measures_the_tasks_prompts_with_the_models_tokenizer(capsys):
    assert main(["estimate", "data.fewshot=2"]) == 0
    out = capsys.readouterr().out
    assert "prompt tokens: the longest of 200 held-out prompts" in out
    longer = int(out.split("of up to ")[1].split("+")[0])
    assert main(["estimate"]) == 0
    plain = int(capsys.readouterr().out.split("of up to ")[1].split("+")[0])
    assert longer > 2 * plain  # two worked examples before every prompt


def test_the_estimate_plans_the_attention_auto_chooses():
    from dataclasses import replace

    from rlvr.estimate.memory import RunPlan, estimate

    shape = _shape_100m()

    def activations(plan: RunPlan) -> float:
        parts = estimate(
            shape, plan, precision="fp32", kl_coef=0.0, lora=False, gradient_checkpointing=False
        )
        return parts["activations"]

    # few-shot prompts of 250 shared by 8 completions of 48: width 634, rows of 298 would
    # attend over 710k pairs, the mask spans 402k: auto keeps the mask, as `dense` does
    long = RunPlan(prompt_tokens=250, max_new_tokens=48, prompts=8, group_size=8, decoded_rows=64)
    auto, dense, rows = (
        activations(replace(long, packed_attention=a)) for a in ("auto", "dense", "segments")
    )
    assert auto == dense != rows
    # prompts of 8: width 392, rows of 56: fewer pairs than the mask, auto runs the segments
    short = replace(long, prompt_tokens=8)
    assert activations(short) == activations(replace(short, packed_attention="segments"))
    assert activations(short) != activations(replace(short, packed_attention="dense"))


def test_a_critic_holds_the_decoder_a_scalar_head_and_their_adam_moments(llama7b, capsys):
    base = ["estimate", f"model.name_or_path={llama7b}", "--precision", "bf16-mixed"]
    assert main(base) == 0
    assert "critic" not in _report(capsys)  # GRPO: no critic line
    assert main([*base, "algorithm.advantage=gae"]) == 0
    r = _report(capsys)
    critic = N_7B - V * H + H + 1  # no LM head (untied: its own V x H), a head of h + 1
    # fp32 masters (4) + two fp32 moments (8) per parameter, sharded by nothing
    assert r["critic"] == f"{critic * 12 / GIB:.2f} GiB"
    assert main([*base, "algorithm.advantage=gae", "--world-size", "8", "--fsdp"]) == 0
    assert _report(capsys)["critic"] == f"{critic * 12 / 8 / GIB:.2f} GiB"
    assert main([*base, "algorithm.advantage=gae", "model.lora_rank=16"]) == 0
    r = _report(capsys)
    lora = L * 16 * (4 * (H + H) + 2 * (H + FF) + (FF + H))
    trainable = lora + H + 1
    # a bf16 frozen base under bf16-mixed LoRA, fp32 adapters and head with fp32 moments
    want = (N_7B - V * H + H + 1) * 2 + trainable * 4 + trainable * 8
    assert r["critic"] == f"{want / GIB:.2f} GiB"


def test_a_learned_reward_holds_its_weights_for_inference(llama7b, capsys):
    base = ["estimate", f"model.name_or_path={llama7b}", "--precision", "fp32"]
    assert main(base) == 0
    assert "reward_model" not in _report(capsys)  # a rule verifier: no such line
    assert main([*base, f"reward.verifier=rm:{llama7b}:1.0,exact_answer:0"]) == 0
    r = _report(capsys)
    rm = N_7B - V * H + H  # the decoder and a bias-free [1, H] score head: no LM head
    assert r["reward_model"] == f"{rm * 4 / GIB:.2f} GiB"  # fp32: model.dtype auto on a CPU
