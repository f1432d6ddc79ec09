"""benchmarks/memory.py: its configurations are valid `rlvr train` configs and its estimate
reading parses `rlvr estimate`'s table (the measured runs take ~35 minutes: docs/memory.md)."""

import importlib.util
import sys
from pathlib import Path

import yaml

from rlvr.config import load_config

REPO = Path(__file__).resolve().parents[2]


def _bench():
    sys.path.insert(0, str(REPO / "scripts"))
    spec = importlib.util.spec_from_file_location("bench_memory", REPO / "benchmarks/memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configs_load_and_the_default_estimate_is_read(tmp_path):
    bench = _bench()
    trees = bench.configs(Path("/models/smollm2"))
    assert set(trees) == {"default", "smollm2", "smollm2-kl", "long-8k"}
    for name, tree in trees.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(tree))
        cfg = load_config(str(path), bench.NO_EVAL)
        assert not cfg.eval.before and not cfg.eval.after and cfg.eval.every == 0
    assert trees["smollm2"]["eval"]["t1_samples"] == 4  # the configuration
    assert trees["smollm2-kl"]["algorithm"]["kl_coef"] > 0
    default = tmp_path / "default.yaml"
    default.write_text(yaml.safe_dump({}))
    mib, phase = bench.estimate_of(default)
    assert 512 < mib < 2048 and phase in {"generation phase", "evaluation phase", "update phase"}
