"""Preference pairs: rows checked with one-line errors naming file, row and field; layouts."""

from __future__ import annotations

import pytest

from rlvr.cli import main
from rlvr.errors import DataError
from rlvr.reward_model.config import RMDataConfig
from rlvr.reward_model.data import (
    batch_indices,
    collate_pairs,
    encode_pairs,
    rows_to_pairs,
    split_heldout,
)

D = RMDataConfig()


@pytest.mark.parametrize(
    "row, message",
    [
        ({"prompt": "1+1=", "rejected": "3"}, "pairs.jsonl row 2: field 'chosen' is missing"),
        ({"chosen": "2", "rejected": ""}, "pairs.jsonl row 2: field 'rejected' is empty"),
        ({"chosen": 2, "rejected": "3"}, "row 2: field 'chosen' must be a string or a list"),
        ({"chosen": "2", "rejected": "3", "margin": "x"}, "row 2: field 'margin' must be a"),
        ({"chosen": [{"role": "assistant"}], "rejected": "3"}, "row 2: field 'chosen' message 1"),
    ],
)
def test_a_bad_row_is_a_data_error_naming_file_row_and_field(row, message):
    good = {"prompt": "1+1=", "chosen": "2", "rejected": "3"}
    with pytest.raises(DataError) as e:
        rows_to_pairs([good, row], D, "pairs.jsonl")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_plain_and_chat_rows_do_not_mix():
    plain = {"chosen": "a", "rejected": "b"}
    chat = {"chosen": [{"role": "assistant", "content": "a"}], "rejected": "b"}
    with pytest.raises(DataError, match="row 2: holds chat messages where row 1 holds plain"):
        rows_to_pairs([plain, chat], D, "f.jsonl")


def test_text_layout_is_prompt_plus_completion_plus_eos(char_tokenizer):
    texts = rows_to_pairs([{"prompt": "1+1=", "chosen": "2", "rejected": "3", "margin": 1}], D, "f")
    (pair,) = encode_pairs(texts, char_tokenizer, "f")
    eos = char_tokenizer.eos_token_id
    assert list(pair.chosen) == char_tokenizer("1+1=2")["input_ids"] + [eos]
    assert list(pair.rejected) == char_tokenizer("1+1=3")["input_ids"] + [eos]
    assert pair.margin == 1.0
    batch = collate_pairs([pair], char_tokenizer.pad_token_id)
    assert batch.input_ids.shape == (2, 6) and batch.attention_mask.sum() == 12


def test_chat_layout_applies_the_template_to_prompt_and_completion(char_tokenizer):
    tok = char_tokenizer
    tok.chat_template = "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
    try:
        row = {
            "prompt": [{"role": "user", "content": "hi"}],
            "chosen": [{"role": "assistant", "content": "yes"}],
            "rejected": [{"role": "assistant", "content": "no"}],
        }
        (pair,) = encode_pairs(rows_to_pairs([row], D, "f"), tok, "f")
        assert tok.decode(list(pair.chosen)) == "u:hi\na:yes\n"
        implicit = {"chosen": row["prompt"] + row["chosen"], "rejected": row["rejected"]}
        (pair,) = encode_pairs(rows_to_pairs([implicit], D, "f"), tok, "f")
        assert tok.decode(list(pair.chosen)) == "u:hi\na:yes\n"
        assert tok.decode(list(pair.rejected)) == "a:no\n"
    finally:
        tok.chat_template = None


def test_chat_rows_need_a_chat_template(char_tokenizer):
    row = {"chosen": [{"role": "assistant", "content": "a"}], "rejected": "b"}
    with pytest.raises(DataError, match="f row 1: cannot lay out the pair: .*no chat template"):
        encode_pairs(rows_to_pairs([row], D, "f"), char_tokenizer, "f")


def test_heldout_split_is_seeded_disjoint_and_at_least_one_pair():
    train, held = split_heldout(50, 0.1, seed=3)
    assert len(held) == 5 and not set(train) & set(held) and len(train) + len(held) == 50
    assert split_heldout(50, 0.1, seed=3) == (train, held)
    assert split_heldout(5, 0.01, seed=0)[1] != [] and split_heldout(5, 0.0, seed=0)[1] == []


def test_an_epoch_visits_every_pair_once():
    seen = [i for step in range(1, 5) for i in batch_indices(step, 10, 3, seed=0)]
    assert sorted(seen) == list(range(10))


def test_cli_reports_a_missing_field_in_one_line_with_exit_2(tmp_path, capsys, make_pairs_file):
    path = make_pairs_file([{"chosen": "a", "rejected": "b"}, {"chosen": "a"}])
    rc = main(["rm", f"data.path={path}", "--output-dir", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert (
        err == f"rlvr: error: {path} row 2: field 'rejected' is missing; expected a "
        "non-empty string or a list of chat messages\n"
    )
    assert not (tmp_path / "run").exists()  # a failed start leaves nothing behind


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], "data.path: required"),
        (["data.path=/nope/pairs.jsonl"], "/nope/pairs.jsonl: file not found"),
        (["data.chosen_field=prompt", "data.path=x.jsonl"], "already data.prompt_field"),
        (["training.batch_size=0"], "training.batch_size: must be >= 1, got 0"),
    ],
)
def test_cli_config_errors_are_one_line_exit_2(tmp_path, capsys, args, expected):
    rc = main(["rm", *args, "--output-dir", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and expected in err and err.count("\n") == 1, err
