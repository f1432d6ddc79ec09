"""Learned reward models: `rlvr rm` trains a Bradley-Terry scalar reward model on preference
pairs (`trainer`), and `reward.verifier=rm:PATH` scores completions with one (`scoring`);
docs/guides/reward-models.md."""
