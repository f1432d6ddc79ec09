"""DAPO overlong reward shaping."""

import pytest

from rlvr.algorithms.shaping import overlong_penalties, overlong_penalty


@pytest.mark.parametrize(
    "length, expected",
    [
        (0, 0.0),
        (80, 0.0),  # = L_max - L_buf: still free
        (81, -1 / 20),
        (90, -0.5),
        (100, -1.0),  # = L_max: full penalty inside the buffer
        (101, -1.0),  # beyond L_max
        (10_000, -1.0),
    ],
)
def test_linear_penalty_inside_the_buffer(length, expected):
    assert overlong_penalty(length, max_tokens=100, buffer_tokens=20) == pytest.approx(expected)


def test_factor_scales_and_caps_the_penalty():
    assert overlong_penalty(90, 100, 20, factor=0.5) == pytest.approx(-0.25)
    assert overlong_penalty(500, 100, 20, factor=0.5) == pytest.approx(-0.5)
    assert overlong_penalty(50, 100, 20, factor=0.5) == 0.0


def test_zero_buffer_only_penalises_beyond_the_limit():
    assert overlong_penalty(100, 100, 0) == 0.0
    assert overlong_penalty(101, 100, 0) == -1.0


def test_batch_form_keeps_order():
    assert overlong_penalties([10, 90, 200], 100, 20) == pytest.approx([0.0, -0.5, -1.0])


@pytest.mark.parametrize("args", [(10, 0, 0), (10, 100, 101), (10, 100, -1), (10, 100, 20, -1.0)])
def test_invalid_settings_raise(args):
    with pytest.raises(ValueError):
        overlong_penalty(*args)
