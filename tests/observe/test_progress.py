"""Progress on stderr: a bar on a terminal, plain greppable lines when redirected (issue 22)."""

import io
import re

from rlvr.observe.metrics import Progress


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _row(step: int, **extra: float) -> dict:
    row = {
        "step": step,
        "reward_mean": 0.25,
        "completion_length_mean": 12.0,
        "entropy": 0.5,
        "step_time_s": 1.0,
        "loss": 0.0,
    }
    return row | extra


def _run(total: int, first: int = 1, step_s: float = 1.0, **kw) -> list[str]:
    """`total` updates from step `first` to a stream that is not a terminal; the lines."""
    stream, clock = io.StringIO(), _Clock()
    progress = Progress(total, True, stream=stream, clock=clock, **kw)
    for step in range(first, first + total):
        clock.now += step_s
        progress.update(_row(step, **({"eval_accuracy": 0.75} if step == 20 else {})))
    progress.close()
    return stream.getvalue().splitlines()


def test_redirected_stderr_gets_a_plain_line_every_twentieth_of_the_run():
    lines = _run(60)
    steps = [int(re.search(r"step (\d+)/60", line)[1]) for line in lines]
    # the first step, every 60 // 20 = 3 steps, and step 20, a held-out evaluation step
    assert steps == sorted([1, 20, *range(3, 61, 3)])
    assert lines[0] == (
        "rlvr train: step 1/60 reward=0.25 len=12 ent=0.5 step_s=1 elapsed=1s eta=59s"
    )
    assert lines[steps.index(20)] == (
        "rlvr train: step 20/60 reward=0.25 acc=0.75 len=12 ent=0.5 step_s=1 elapsed=20s eta=40s"
    )
    assert all("loss" not in line for line in lines)  # RL's loss is ~0: not shown
    assert all("\r" not in line and "\x1b" not in line for line in lines)  # no bar codes


def test_slow_steps_print_at_least_every_30_seconds():
    lines = _run(100, step_s=40.0)  # each step longer than the interval: every step
    assert len(lines) == 100
    assert lines[-1].endswith("elapsed=1h06m eta=0s")
    lines = _run(100, step_s=11.0)  # a line on the first step 30 s after the previous one
    steps = [int(re.search(r"step (\d+)/", line)[1]) for line in lines]
    assert steps[:5] == [1, 4, 5, 8, 10] and steps[-1] == 100  # 5: every 100 // 20


def test_a_resumed_run_counts_from_its_checkpoint():
    # RL resumes with the bar's total = the steps left, rows carrying their own step numbers.
    lines = _run(30, first=31)
    assert lines[0].startswith("rlvr train: step 31/60 ")
    assert lines[-1].startswith("rlvr train: step 60/60 ")
    # SFT: the full total, the steps already done replayed as empty updates (never printed).
    stream, clock = io.StringIO(), _Clock()
    progress = Progress(10, True, desc="rlvr sft", stream=stream, clock=clock)
    for _ in range(4):
        progress.update({})
    clock.now = 2.0
    progress.update({"step": 5, "loss": 1.2345, "step_time_s": 2.0})
    assert stream.getvalue() == "rlvr sft: step 5/10 loss=1.234 step_s=2 elapsed=2s eta=10s\n"


def test_rows_without_a_step_count_updates():
    stream = io.StringIO()
    progress = Progress(4, True, desc="rlvr sample", stream=stream, clock=_Clock())
    progress.update({"reward_mean": 0.5})
    assert stream.getvalue().startswith("rlvr sample: 1/4 reward=0.5 ")


def test_disabled_or_a_terminal_prints_no_plain_line():
    stream = io.StringIO()
    progress = Progress(10, False, stream=stream)
    progress.update(_row(1))
    assert stream.getvalue() == ""
    terminal = _Terminal()
    progress = Progress(10, True, stream=terminal)
    assert progress.bar is not None  # the tqdm bar, as before
    progress.update(_row(1))
    progress.close()
    assert "rlvr train: step" not in terminal.getvalue()
    assert "reward=0.25" in terminal.getvalue()  # the bar's postfix
