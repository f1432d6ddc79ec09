import math

from rlvr.rewards.scoring import Scorer


def test_a_crashing_or_nan_verifier_gives_zero_reward_and_is_counted():
    def verifier(text, sample):
        if text == "boom":
            raise RuntimeError("bug in user code")
        if text == "nan":
            return math.nan
        return 1.0

    rewards, failures = Scorer(verifier)(["ok", "boom", "nan", "ok"], [{}] * 4)
    assert rewards == [1.0, 0.0, 0.0, 1.0]
    assert failures == 2
