"""The lenient reading (`math_lenient`): completions without a box, tag or answer line are read
by math-verify's extraction, with the strict verifier's hardening kept: hedging, exact numbers,
the reasoning block, non-ASCII digits, time limits, no evaluation of model text."""

import pickle
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("math_verify")

from rlvr.rewards.math import MathVerifier, math_lenient_reward, math_reward  # noqa: E402
from rlvr.rewards.math.lenient import extracted_spans, lenient_answers  # noqa: E402
from rlvr.rewards.registry import get_verifier  # noqa: E402

LIMIT_S = 2.0
MINERVA = "Final Answer: The final answer is ${}$. I hope it is correct."


@pytest.fixture(scope="module")
def lenient():
    v = MathVerifier(timeout_s=LIMIT_S, lenient=True)
    yield v
    v.close()


def _id(case):
    return repr(case)[:60]


# (completion, gold): the lenient reading scores 1.0, the strict one 0.0
READ = [
    ("Therefore $x \\geq 5$ is the solution.", "x \\ge 5"),
    ("So the answer is 7.", "7"),
    ("We find $k = \\frac{1}{3}$", "1/3"),
    ("The answer is $\\frac{1}{3}.$", "1/3"),
    ("It costs $1,000.99 in total", "1000.99"),
    ("The share is 28 percent", "28\\%"),
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("Answer: the value is 7", "7"),
    ("The roots are $-2$ and $1$.", "1,-2"),
    ("x is -2, or 1", "1,-2"),
    ("<think>maybe \\boxed{4}</think> We get 5", "5"),
]
# (completion, gold): 0.0 in both readings
REJECT = [
    # hedging: every answer must match
    ("The answer is 5 or 6.", "5"),
    ("The answer is 5 or 6.", "6"),
    ("It is $5$ or $6$", "6"),
    ("Answer: 5 or 6", "5"),
    ("Answer: 5 or 6", "6"),
    ("Answer: 12\nAnswer: 13", "13"),
    (MINERVA.format("5") + "\n" + MINERVA.format("6"), "6"),
    ("\\boxed{5} or \\boxed{6}", "6"),
    ("The roots are $-2$ and $1$.", "1"),
    # the strict reading wherever there is a tag or box
    ("<answer>5</answer> " + MINERVA.format("6"), "6"),
    ("\\boxed{5} and later the answer is 6", "6"),
    ("\\boxed{5", "5"),
    # exact numbers, text, digits
    ("The answer is 0.3333", "1/3"),
    ("The answer is 3.14", "\\pi"),
    ("The answer is 5", "-5"),
    ("The answer is ５", "5"),
    ("AZYUK2A", "2"),
    ("I do not know.", "0"),
    ("Answer: I do not know", "0"),
    # reasoning is not the answer; a cut trace has none
    ("<think>The answer is 5</think>", "5"),
    ("<think>The answer is 5</think> No, it is 6.", "5"),
    ("<think>so the answer is 5", "5"),
]


@pytest.mark.parametrize("completion, gold", READ, ids=_id)
def test_lenient_reads_answers_without_a_marker(lenient, completion, gold):
    assert lenient(completion, {"answer": gold}) == 1.0
    assert math_reward(completion, {"answer": gold}) == 0.0


@pytest.mark.parametrize("completion, gold", REJECT, ids=_id)
def test_lenient_keeps_the_strict_defences(lenient, completion, gold):
    assert lenient(completion, {"answer": gold}) == 0.0


@pytest.mark.parametrize(
    "completion, gold",
    [
        ("\\boxed{\\frac12}", "0.5"),
        ("<answer>7</answer>", "7"),
        ("Answer: 2^{10}", "1024"),
        ("Answer: sqrt(2)", "\\sqrt{2}"),
        ("Answer: x = 5", "5"),
        ("Answer: Monday", "Monday"),
        ("Answer: \\frac{3}{4}", "0.75"),
        ("Answer: it is $5$", "5"),
        # Minerva's closing line is the answer even after boxed intermediate results
        ("\\boxed{200} then \\boxed{255}. " + MINERVA.format("10,455"), "10455"),
    ],
    ids=_id,
)
def test_answers_the_strict_reading_takes_score_one_here_too(lenient, completion, gold):
    assert math_reward(completion, {"answer": gold}) == 1.0
    assert lenient(completion, {"answer": gold}) == 1.0


def test_the_last_expression_is_the_answer():
    spans = extracted_spans("First $x = 2$, then we double it: $4$.")
    assert [a for _, _, a in spans] == ["4"]
    assert lenient_answers("So $2$, and so $4$", None).answers == ("4",)
    assert lenient_answers("So 2, and 4", None).answers == ("2", "4")


def test_detail_shows_the_answer_read(lenient):
    score = lenient.score("Thus the total is 42.", {"answer": "42"})
    assert score.reward == 1.0 and score.detail == "42"
    assert lenient.score("nothing here", {"answer": "1"}).detail == "no final answer"


def test_registered_and_picklable_with_its_reading():
    assert get_verifier("math_lenient") is math_lenient_reward
    assert get_verifier("rlvr.rewards.math:math_lenient_reward") is math_lenient_reward
    clone = pickle.loads(pickle.dumps(math_lenient_reward))
    assert clone.lenient and clone._worker is None
    inline = clone.for_worker()
    assert inline.lenient and not inline.isolate
    assert inline("The answer is 9.", {"answer": "9"}) == 1.0


def test_model_text_is_never_evaluated(lenient, tmp_path):
    marker = tmp_path / "pwned"
    payload = f"The answer is __import__('os').system('touch {marker}') = 0"
    assert lenient(payload, {"answer": "1"}) == 0.0
    assert not marker.exists()


@pytest.mark.parametrize(
    "completion",
    [
        "The answer is $5^{5^{5^{5^5}}}$",
        "So the result is 9**9**9**9**9",
        "$$ " * 20_000 + "so 5",
        ("answer " + "$1 " * 5_000) * 4,
        "\\[ x " * 20_000,  # math-verify's regexes: quadratic, minutes without the kill
    ],
    ids=["power-tower", "plain-power-tower", "display-math", "many-answers", "open-brackets"],
)
def test_pathological_completions_score_zero_within_the_limit(lenient, completion):
    lenient("The answer is 1.", {"answer": "1"})  # worker up
    start = time.monotonic()
    assert lenient(completion, {"answer": "6"}) == 0.0
    assert time.monotonic() - start < LIMIT_S + 1.0


PIECES = [
    "Final Answer: The final answer is ",
    ". I hope it is correct.",
    "answer: ",
    "Answer ",
    " is ",
    " or ",
    " and ",
    ", ",
    "$",
    "$$",
    "\\(",
    "\\)",
    "\\[",
    "\\]",
    "\\boxed{",
    "}",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "\\frac{1}{2}",
    "1",
    "-2",
    "3.5",
    "1,000",
    "٣",
    " percent",
    "=",
    "x",
    "\n",
]


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    pieces=st.lists(st.sampled_from(PIECES), max_size=30),
    gold=st.sampled_from(["1", "-2", "1/2", "3.5", "1000", "1,-2", "x = 1", "x"]),
)
def test_lenient_scores_any_completion_in_bounded_time(lenient, pieces, gold):
    start = time.monotonic()
    reward = lenient("".join(pieces), {"answer": gold})
    assert reward in (0.0, 1.0)
    assert time.monotonic() - start < LIMIT_S + 10.0  # the kill and a fresh worker


def test_a_verifier_pool_scores_with_the_lenient_reading():
    from rlvr.rewards.pool import VerifierPool

    completions = ["So it is 7.", "The answer is 5 or 7.", "\\boxed{7}"]
    with VerifierPool("math_lenient", workers=1, timeout_s=10.0) as pool:
        rewards, failures, details = pool.score_batch(completions, [{"answer": "7"}] * 3)
    assert rewards == [1.0, 0.0, 1.0] and failures == 0
    assert details[0] == "7"
