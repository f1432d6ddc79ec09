"""Rejection sampling, pass rates and the curriculum band over hand-built scored rows."""

import copy

import pytest

from rlvr.data.rejection import (
    DROP_REASONS,
    RejectionOptions,
    curriculum_band,
    normalize_whitespace,
    pass_rate_histogram,
    pass_rates,
    rejection_sample,
    think_block_format,
)
from rlvr.errors import ConfigError, DataError

GOOD = "<think>7+5+0=12,4+8+1=13,3+2+1=06</think>632"


def row(pid, completion, reward=1.0, num_tokens=10, finish_reason="eos", **extra):
    return {
        "id": pid,
        "prompt": f"{pid}=",
        "answer": "632",
        "completion": completion,
        "reward": reward,
        "num_tokens": num_tokens,
        "finish_reason": finish_reason,
        **extra,
    }


# Each row with the reason it must be dropped for (None: kept), under ALL_ON below.
LABELLED = [
    (row("a", GOOD), None),
    (row("a", "632", reward=0.0), "incorrect"),
    (row("a", GOOD, reward=0.99), "incorrect"),
    (row("a", GOOD + "1", finish_reason="length"), "truncated"),
    (row("a", "632"), "format"),  # correct, but no think block
    (row("a", "<think></think>632"), "format"),  # empty think block
    (row("b", "<think>x</think>632", num_tokens=2), "too_short"),
    (row("b", "<think>" + "y" * 40 + "</think>632", num_tokens=43), "too_long"),
    (row("b", "<think>7+5+0=12</think>632", num_tokens=30), None),  # max_tokens is inclusive
    (row("b", "<think>7+5+0=12</think>632 ", num_tokens=31), "too_long"),
    (row("a", " " + GOOD.replace(",", ", ") + "\n"), None),  # differs inside: not a duplicate
    (row("a", "  " + GOOD + "\n\n"), "duplicate"),  # same after whitespace normalisation
    (row("a", "<think>7+5=12</think>632"), "over_cap"),  # a already has max_per_prompt = 2
    (row("c", GOOD), None),  # same text, other prompt: not a duplicate
    (row("c", "<think>a</think>632", num_tokens=3), None),  # min_tokens is inclusive
]
ALL_ON = RejectionOptions(
    min_reward=1.0,
    dedup=True,
    max_per_prompt=2,
    min_tokens=3,
    max_tokens=30,
    require_format=True,
    drop_truncated=True,
)


def test_keeps_exactly_the_verified_rows_and_counts_each_drop_under_one_reason():
    rows = [r for r, _ in LABELLED]
    kept, drops = rejection_sample(rows, ALL_ON)
    assert kept == [r for r, reason in LABELLED if reason is None]
    expected = {reason: 0 for reason in DROP_REASONS}
    for _, reason in LABELLED:
        if reason is not None:
            expected[reason] += 1
    assert drops == expected
    assert list(drops) == list(DROP_REASONS)
    assert len(kept) + sum(drops.values()) == len(rows)
    assert all(count > 0 for count in drops.values())  # the table exercises every reason


def test_a_row_failing_several_checks_counts_under_the_first_in_documented_order():
    opts = RejectionOptions(require_format=True, min_tokens=5, max_per_prompt=1)
    cases = [
        (row("a", "junk", reward=0.0, finish_reason="length", num_tokens=1), "incorrect"),
        (row("a", "junk", finish_reason="length", num_tokens=1), "truncated"),
        (row("a", "632", num_tokens=1), "format"),
        (row("a", GOOD, num_tokens=1), "too_short"),
    ]
    for r, reason in cases:
        _, drops = rejection_sample([r], opts)
        assert drops[reason] == 1 and sum(drops.values()) == 1, reason


def test_defaults_keep_correct_direct_answers_and_drop_truncated_and_duplicates():
    opts = RejectionOptions()
    assert (opts.min_reward, opts.dedup, opts.max_per_prompt) == (1.0, True, 0)
    assert (opts.min_tokens, opts.max_tokens, opts.require_format) == (0, 0, False)
    assert opts.drop_truncated is True
    rows = [
        row("a", "632"),
        row("a", "632 "),
        row("a", GOOD, finish_reason="length"),
        row("a", GOOD, num_tokens=10_000),
    ]
    kept, drops = rejection_sample(rows)
    assert kept == [rows[0], rows[3]]
    assert drops["duplicate"] == 1 and drops["truncated"] == 1


def test_switching_filters_off_keeps_what_they_would_drop():
    rows = [row("a", GOOD, finish_reason="length"), row("a", GOOD)]
    off = RejectionOptions(dedup=False, drop_truncated=False)
    kept, drops = rejection_sample(rows, off)
    assert kept == rows and sum(drops.values()) == 0


def test_truncation_needs_no_finish_reason_when_drop_truncated_is_off():
    r = row("a", GOOD)
    del r["finish_reason"], r["num_tokens"]
    kept, _ = rejection_sample([r], RejectionOptions(drop_truncated=False))
    assert kept == [r]


def test_min_reward_is_inclusive_and_configurable():
    rows = [row("a", "x", reward=0.5), row("a", "y", reward=0.49)]
    kept, drops = rejection_sample(rows, RejectionOptions(min_reward=0.5))
    assert [r["completion"] for r in kept] == ["x"] and drops["incorrect"] == 1


def test_duplicates_do_not_use_up_the_per_prompt_cap():
    rows = [row("a", "1"), row("a", " 1"), row("a", "2"), row("a", "3")]
    kept, drops = rejection_sample(rows, RejectionOptions(max_per_prompt=2))
    assert [r["completion"] for r in kept] == ["1", "2"]
    assert drops["duplicate"] == 1 and drops["over_cap"] == 1


def test_rejection_sampling_is_deterministic_and_leaves_its_input_alone():
    rows = [r for r, _ in LABELLED]
    before = copy.deepcopy(rows)
    first = rejection_sample(rows, ALL_ON)
    assert rejection_sample(rows, ALL_ON) == first
    assert rows == before
    first[0][0]["completion"] = "changed"
    assert rows == before  # kept rows are copies


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ({"reward": None}, "row 2: field 'reward' must be a number"),
        ({"reward": float("nan")}, "row 2: field 'reward' must be a finite number"),
        ({"completion": 3}, "row 2: field 'completion' must be a string"),
        ({"id": None}, "row 2: field 'id'"),
        ({"finish_reason": None}, "row 2: field 'finish_reason'"),
        ({"num_tokens": "12"}, "row 2: field 'num_tokens' must be an integer"),
    ],
)
def test_a_malformed_row_is_a_data_error_naming_row_and_field(broken, message):
    rows = [row("a", GOOD), {**row("a", "x"), **broken}]
    with pytest.raises(DataError, match=message):
        rejection_sample(rows, RejectionOptions(min_tokens=1))


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (RejectionOptions(min_tokens=10, max_tokens=5), "min_tokens: must be <= max_tokens"),
        (RejectionOptions(max_per_prompt=-1), "max_per_prompt: must be an integer >= 0"),
        (RejectionOptions(min_reward=float("inf")), "min_reward: must be a finite number"),
    ],
)
def test_inconsistent_options_are_a_config_error(opts, message):
    with pytest.raises(ConfigError, match=message):
        rejection_sample([], opts)


@pytest.mark.parametrize(
    ("completion", "ok"),
    [
        (GOOD, True),
        ("  <think> a b </think>\n 632 \n", True),
        ("<think>a</think><answer>632</answer>", True),
        ("632", False),
        ("<think></think>632", False),
        ("<think> \n </think>632", False),
        ("<think>a</think>", False),
        ("<think>a</think>   ", False),
        ("<think>a", False),
        ("x<think>a</think>632", False),
        ("<think>a<think>b</think>632", False),
        ("<think>a</think>632</think>", False),
        ("<think>a</think>6<think>b</think>32", False),
    ],
)
def test_format_filter_accepts_only_one_leading_nonempty_think_block_and_an_answer(completion, ok):
    assert (think_block_format(completion) == 1.0) is ok


def test_normalize_whitespace_collapses_runs_and_strips():
    assert normalize_whitespace("  a \n\t b  ") == "a b"


def test_pass_rates_count_correct_completions_per_prompt_in_first_seen_order():
    rows = [
        row("b", "1", reward=1.0, source="s1"),
        row("a", "1", reward=0.0),
        row("b", "2", reward=0.0, source="s1"),
        row("a", "2", reward=0.7),
        row("b", "3", reward=1.0, source="s1"),
    ]
    rates = pass_rates(rows)
    assert [r["id"] for r in rates] == ["b", "a"]
    assert rates[0] == {
        "id": "b",
        "prompt": "b=",
        "answer": "632",
        "source": "s1",
        "n": 3,
        "correct": 2,
        "pass_rate": 2 / 3,
    }
    assert "source" not in rates[1]
    assert (rates[1]["n"], rates[1]["correct"], rates[1]["pass_rate"]) == (2, 0, 0.0)
    assert pass_rates(rows, min_reward=0.5)[1]["correct"] == 1
    with pytest.raises(DataError, match="row 6: field 'prompt' must be a string"):
        pass_rates([*rows, {**row("z", "1"), "prompt": None}])


def test_curriculum_band_keeps_both_edges_and_drops_always_and_never_solved():
    rates = [{"id": str(c), "pass_rate": c / 10, "correct": c, "n": 10} for c in range(11)]
    kept, too_easy, too_hard = curriculum_band(rates, low=0.1, high=0.9)
    assert [r["id"] for r in kept] == [str(c) for c in range(1, 10)]
    assert [r["id"] for r in too_easy] == ["10"]
    assert [r["id"] for r in too_hard] == ["0"]


def test_curriculum_band_edges_hold_for_pass_rates_computed_from_counts():
    rows = [row("lo", str(i), reward=float(i == 0)) for i in range(10)]
    rows += [row("hi", str(i), reward=float(i != 0)) for i in range(10)]
    rows += [row("lo3", str(i), reward=float(i < 3)) for i in range(30)]
    kept, too_easy, too_hard = curriculum_band(pass_rates(rows))
    assert [r["id"] for r in kept] == ["lo", "hi", "lo3"]
    assert not too_easy and not too_hard
    kept, too_easy, too_hard = curriculum_band(pass_rates(rows), low=0.11, high=0.89)
    assert not kept and [r["id"] for r in too_easy] == ["hi"]
    assert [r["id"] for r in too_hard] == ["lo", "lo3"]


@pytest.mark.parametrize(("low", "high"), [(0.6, 0.5), (-0.1, 0.5), (0.1, 1.5)])
def test_an_invalid_band_is_a_config_error(low, high):
    with pytest.raises(ConfigError, match="low <= high"):
        curriculum_band([], low, high)


def test_histogram_bins_are_left_closed_and_the_last_bin_holds_1():
    rates = [{"correct": c, "n": 10} for c in (0, 1, 3, 9, 10, 10)] + [{"correct": 1, "n": 3}]
    hist = pass_rate_histogram(rates)
    assert hist["edges"][0] == 0.0 and hist["edges"][-1] == 1.0 and len(hist["edges"]) == 11
    assert hist["counts"] == [1, 1, 0, 2, 0, 0, 0, 0, 0, 3]
