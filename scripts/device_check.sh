#!/usr/bin/env bash
# The GPU check (issue 23; docs/benchmarks.md, "GPU check"). From anywhere:
#
#   bash scripts/device_check.sh             # on a CUDA machine: installs, then every stage
#   bash scripts/device_check.sh --cpu       # dry run on the CPU: tiny settings, no installs
#   bash scripts/device_check.sh --out FILE  # also write the JSON line to FILE (else $OUT)
#
# Installs (pip, from the package index), runs the CUDA tests, a default `rlvr train`, SmolLM2
# with rollout.engine=fast and =vllm, benchmarks/rollout_speed.py and benchmarks/vs_trl.py, each
# stage with its own timeout inside an 8-minute budget, and prints one JSON line at the end.
# The stages live in scripts/device_check.py (standard library only); this wrapper picks the
# Python: $PYTHON, else the active virtual environment, else (GPU mode) a virtual environment
# at $DEVICE_CHECK_VENV (default ~/.cache/rlvr/device-check-venv) that sees the system's
# packages, so a preinstalled CUDA torch is reused rather than downloaded again.
# Environment: DEVICE_CHECK_TORCH (torch spec, default "torch": a CUDA build from the index),
# DEVICE_CHECK_EXTRAS (default "test"), DEVICE_CHECK_STAGES, DEVICE_CHECK_BUDGET (seconds),
# DEVICE_CHECK_TIMEOUT_<STAGE>, DEVICE_CHECK_WORK (logs and runs, default runs/device-check).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

cpu=0
for arg in "$@"; do
    if [[ $arg == --cpu ]]; then cpu=1; fi
done

pick_python() {
    if [[ -n ${PYTHON:-} ]]; then
        echo "$PYTHON"
    elif [[ -n ${VIRTUAL_ENV:-} ]]; then
        echo "$VIRTUAL_ENV/bin/python"
    elif [[ $cpu == 1 ]]; then
        command -v python3 || command -v python
    else
        local venv=${DEVICE_CHECK_VENV:-$HOME/.cache/rlvr/device-check-venv}
        if [[ -x $venv/bin/python ]] || python3 -m venv --system-site-packages "$venv" >&2; then
            echo "$venv/bin/python"
        else
            # No venv module: the system Python, allowed to install into itself.
            echo "device_check: no virtual environment; installing into the system Python" >&2
            export PIP_BREAK_SYSTEM_PACKAGES=1
            command -v python3 || command -v python
        fi
    fi
}

py=$(pick_python)
if [[ -z $py ]]; then
    echo "device_check: no Python found" >&2
    exit 2
fi
echo "device_check: $("$py" --version 2>&1) at $py" >&2
exec "$py" scripts/device_check.py "$@"
