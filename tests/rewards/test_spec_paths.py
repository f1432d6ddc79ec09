"""A run's recorded config names its local files absolutely, so `--resume` works from anywhere."""

from rlvr.rewards.spec import absolute_learned
from rlvr.runs.run_dir import absolute_paths


def test_relative_reward_model_directories_become_absolute_and_keep_their_weights(
    tmp_path, monkeypatch
):
    (tmp_path / "runs" / "rm" / "final").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    final = tmp_path / "runs" / "rm" / "final"
    assert (
        absolute_learned("rm:runs/rm/final:1.0,exact_answer:0") == f"rm:{final}:1.0,exact_answer:0"
    )
    assert absolute_learned("rm:runs/rm/final") == f"rm:{final}"
    assert absolute_learned("rm:org/reward-model:0.5") == "rm:org/reward-model:0.5"  # a hub id
    tree = {
        "reward": {"verifier": "rm:runs/rm/final,math:0.1", "mix_verifier": "rm:runs/rm/final"},
        "eval": {"verifier": "exact_answer"},
    }
    out = absolute_paths(tree)
    assert out["reward"]["verifier"] == f"rm:{final},math:0.1"
    assert out["reward"]["mix_verifier"] == f"rm:{final}"
    assert out["eval"]["verifier"] == "exact_answer"
