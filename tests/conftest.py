"""Shared fixtures: a character-level tokenizer and a tiny random Llama built in memory.

Nothing here touches the network; every model is random and small enough for a shared CPU.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from rlvr.models.embedded.build import build_tokenizer

SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]
CHARACTERS = string.digits + string.ascii_letters + " +-=*.,:?\n"
THINK_TOKENS = ["<think>", "</think>"]


def pytest_configure(config: pytest.Config) -> None:
    # Tiny models gain nothing from intra-op threads, and on a shared 2-core machine thread
    # contention made each 32-wide matmul ~10x slower.
    torch.set_num_threads(1)


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """The embedded model's character-level tokenizer: one token per character, `<think>` and
    `</think>` as single added tokens, decode(encode(text)) == text exactly."""
    return build_tokenizer()


def build_tiny_llama(
    tokenizer: PreTrainedTokenizerFast, seed: int = 0, tie: bool = False
) -> LlamaForCausalLM:
    """A randomly initialised 2-layer Llama (hidden 32, 2 heads), fp32, in eval mode; `tie`:
    the output head shares the input embedding's weight."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=tie,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model.eval()


def assert_token_exact(model, tok, batch, atol: float = 2e-5, observations: bool = False) -> None:
    """A multi-turn batch as the update reads it: at every sampled token (loss mask 1) the
    learner's log-prob equals the sampler's within `atol`; every inserted token has mask 0 and
    log-prob 0; with `observations`, the inserted tokens decode to the environment's text of
    the row's transcript."""
    from rlvr.forward.logprobs import completion_logprobs, make_token_batch

    tokens = make_token_batch(
        batch.prompt_ids, batch.completion_ids, tok.pad_token_id, batch.loss_masks
    )
    learner_lp, _ = completion_logprobs(model, tokens)
    for i in range(len(batch)):
        n = batch.completion_ids[i].numel()
        mask = batch.loss_masks[i].bool()
        assert tokens.completion_mask[i, :n].bool().tolist() == mask.tolist()
        torch.testing.assert_close(
            learner_lp[i, :n][mask], batch.logprobs[i][mask], atol=atol, rtol=0
        )
        assert batch.logprobs[i][~mask].eq(0).all()
        if observations:
            shown = "".join(text for who, text in batch.tools[i].transcript if who == "env")
            assert tok.decode(batch.completion_ids[i][~mask]) == shown


def build_head32_llama(tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> LlamaForCausalLM:
    """A random 2-layer Llama, hidden 64, 2 query heads of 32 sharing one K/V head, tied
    embeddings: the smallest shape vLLM's CPU attention kernels run (head size >= 32)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model.eval()


@pytest.fixture(scope="session")
def make_head32_llama(
    _session_char_tokenizer: PreTrainedTokenizerFast,
) -> Callable[[int], LlamaForCausalLM]:
    """Factory of `build_head32_llama` models over the char tokenizer: `make(seed)`."""
    return lambda seed=0: build_head32_llama(_session_char_tokenizer, seed)


@pytest.fixture(scope="session")
def _session_char_tokenizer() -> PreTrainedTokenizerFast:
    return build_char_tokenizer()


@pytest.fixture
def char_tokenizer(_session_char_tokenizer: PreTrainedTokenizerFast) -> PreTrainedTokenizerFast:
    """Character-level PreTrainedTokenizerFast with `<pad>`, `<eos>`, `<think>`, `</think>`."""
    return _session_char_tokenizer


@pytest.fixture
def tiny_llama(char_tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """A fresh tiny random LlamaForCausalLM (seed 0) matching `char_tokenizer`'s vocab."""
    return build_tiny_llama(char_tokenizer)


@pytest.fixture
def make_tiny_llama(
    char_tokenizer: PreTrainedTokenizerFast,
) -> Callable[[int], LlamaForCausalLM]:
    """Factory for more tiny Llamas: `make_tiny_llama(seed, tie=False)`; other seeds give other
    weights."""
    return lambda seed=0, tie=False: build_tiny_llama(char_tokenizer, seed, tie)


@pytest.fixture
def tiny_model_dir(
    tmp_path: Path, tiny_llama: LlamaForCausalLM, char_tokenizer: PreTrainedTokenizerFast
) -> Path:
    """A directory holding `save_pretrained` of `tiny_llama` and `char_tokenizer`.

    Load it back with `AutoModelForCausalLM.from_pretrained(path)` and
    `AutoTokenizer.from_pretrained(path)`.
    """
    path = tmp_path / "tiny_llama"
    tiny_llama.save_pretrained(path)
    char_tokenizer.save_pretrained(path)
    return path


# `pytest -n 2 --dist loadgroup` (the README's test command): the tests that start process
# groups, torchrun jobs or Ray clusters run one after another on one worker, beside the rest.
_ONE_AT_A_TIME = ("tests/distributed/", "guides/distributed.md")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(part in item.nodeid for part in _ONE_AT_A_TIME):
            item.add_marker(pytest.mark.xdist_group("distributed"))
