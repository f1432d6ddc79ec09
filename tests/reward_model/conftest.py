"""Fixtures of the reward-model tests: pair files and a tiny random reward model on disk."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForSequenceClassification


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def make_pairs_file(tmp_path: Path) -> Callable[..., Path]:
    """`make(rows, name="pairs.jsonl")`: the rows as a JSONL file under tmp_path."""
    return lambda rows, name="pairs.jsonl": write_jsonl(tmp_path / name, rows)


@pytest.fixture
def tiny_rm_dir(tmp_path: Path, char_tokenizer) -> Path:
    """A random 2-layer LlamaForSequenceClassification (hidden 32, one label) and the char
    tokenizer, saved: what `rm:PATH` loads."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(char_tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=char_tokenizer.eos_token_id,
        pad_token_id=char_tokenizer.pad_token_id,
        bos_token_id=None,
        num_labels=1,
    )
    model = LlamaForSequenceClassification(config)
    torch.nn.init.normal_(model.score.weight, std=1.0)  # scores far apart: comparisons are clear
    path = tmp_path / "tiny_rm"
    model.save_pretrained(path)
    char_tokenizer.save_pretrained(path)
    return path
