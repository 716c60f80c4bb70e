#!/usr/bin/env bash
# One call on the lent GPU machine: build, the whole suite (CUDA tests run
# there), the benchmarks side by side with the old package, a short table last.
#   device: run(command="bash bench/device_run.sh", carry=[".whl"])
# .whl holds the old package's wheels (pip download pytorch-memlab calmsize), the
# line_profiler package for the coexistence tests, and .whl/nb (IPython, kernel).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/memlab-out}
mkdir -p "$OUT"
STAGES=${STAGES:-build test bench notebook}
summary=()

if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $(ls .whl/calmsize*.whl .whl/line_profiler*.whl 2>/dev/null)
    rm -rf /tmp/old && mkdir -p /tmp/old && (cd /tmp/old && python3 -m zipfile -e "$OLDPWD"/.whl/pytorch_memlab-*.whl . \
        && mv pytorch_memlab old_pytorch_memlab && rm -rf pytorch_memlab-*.dist-info)
    # IPython, ipykernel, nbclient and their needs, for the magics and notebook
    if ls .whl/nb/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/nb/*.whl
    fi
    export PYTHONPATH=/tmp/site:/tmp/old
fi
# (the old wheel's dist-info is dropped above: first on PYTHONPATH, it would
# shadow this checkout's metadata, its pytest11 entry point and install kind)

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"

if [[ $STAGES == *build* ]]; then
    MEMLAB_WERROR=1 python3 -m pip install -q --no-build-isolation --no-deps -e . >"$OUT/build.log" 2>&1
    rc=$?; summary+=("build rc=$rc"); [ $rc -eq 0 ] || { tail -40 "$OUT/build.log"; exit 1; }
    python3 -c "import pytorch_memlab._tracer as t, pytorch_memlab._torchshim as s; print('mechanism', t.MECHANISM, 'shim ABI', s.ABI_VERSION)"
fi

if [[ $STAGES == *test* ]]; then
    python3 -m pytest ${PYTEST_TARGETS:-test} -q -rs -p no:cacheprovider -m "not slow" 2>&1 | tee "$OUT/pytest.log" | tail -40
    summary+=("pytest: $(grep -E '^[0-9]+ (passed|failed)|passed|failed' "$OUT/pytest.log" | tail -1)")
    python3 -m pytest ${PYTEST_TARGETS:-test} -q -p no:cacheprovider -m cuda 2>&1 | tail -3 | tee "$OUT/pytest-cuda.log"
    summary+=("pytest -m cuda: $(tail -1 "$OUT/pytest-cuda.log")")
fi

if [[ $STAGES == *bench* ]]; then
    for b in bench/bench_tracer.py bench/bench_torch.py bench/bench_costs.py; do
        [ -f "$b" ] || continue
        python3 "$b" 2>&1 | tee "$OUT/$(basename "$b" .py).log" | tail -25
    done
fi

if [[ $STAGES == *notebook* ]] && [ -f demo.ipynb ]; then
    python3 bench/run_notebook.py demo.ipynb "$OUT/demo.ipynb" 2>&1 | tail -5
    summary+=("notebook: $(tail -1 "$OUT/notebook.log" 2>/dev/null)")
fi

echo "==== summary"
printf '%s\n' "${summary[@]}"
