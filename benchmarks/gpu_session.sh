#!/usr/bin/env bash
# One GPU-machine call: install jax_tsm2 against the jax there, run the GPU
# tests and the benchmark harness, and leave everything under $OUT. Prints a
# short summary last.
#
#   bash benchmarks/gpu_session.sh [extra args for python -m jax_tsm2.bench]
#
# The products from real programs and a validation grid of 120 shapes, in one
# call of at most 10 minutes (the grid alone is ~5 minutes on an H200):
#
#   TESTS=0 BENCH_RUNS='--family APP; --model --grid 120 --grid-seed 11' \
#     bash benchmarks/gpu_session.sh
#
#   BENCH=0 / TESTS=0 skip a part; PYTEST_ARGS narrows the tests (default tests/).
#   The tests marked timing run first, alone on the GPU (pytest-xdist's workers
#     deselect them); TIMING=0 skips them.
#   PYTEST_GROUPS='ARGS; ARGS; ...' runs these pytest argument lists side by
#     side instead, a process and a log each (shell quoting inside a list
#     holds). The other tests only check results, so sharing the GPU is safe, and one
#     process leaves most of the machine's host cores idle (on an H100 machine the
#     matmul, ABFT/k-means and sanitizer tests ran together in 390 s).
#   GPU_WORKERS is set (and exported) to the pytest-xdist workers the GPU's memory
#     holds at GIB_PER_WORKER (default 10) GiB each: 14 on an H200, 7 on an H100 (14
#     workers on an 80 GB H100 failed a hundred tests with CUDA out of memory). The
#     groups are evaluated after it is set, so that
#     PYTEST_GROUPS='tests --ignore=tests/test_gpu_sanitizer.py -n $GPU_WORKERS' (single
#     quotes) sizes the run to the card; groups side by side share it.
#   BENCH_RUNS='ARGS; ARGS; ...' runs the harness once per argument list, one
#     after the other (never side by side: they time the GPU), run i into
#     $OUT/bench-i; without it, one run of the script's own arguments into
#     $OUT/bench.
#   DEADLINE (seconds from the script's start, default 570) bounds the harness
#     runs: each is given --time-budget for what is left, less 30 s for its last
#     case and its files, so that a run cut short still writes its summary (an
#     explicit --time-budget in a run's arguments wins).
#   CALIBRATE=SECONDS first calibrates this GPU (python -m jax_tsm2.tune
#     --calibrate --budget SECONDS) into $JAX_TSM2_CACHE_DIR (default
#     /tmp/jax_tsm2_cache), so that the tests and harness runs after it route
#     with it, and copies the calibration file to $OUT.
#   STREAMS='--shape r:f32:nn:20000x20000x8 --shape t:f32:tn:1x239600x2 ...' times
#     those kernels forced beside XLA's dot (benchmarks/stream_kernels.py) after the
#     calibration and before the tests, alone on the GPU, into $OUT/streams.json,
#     for at most STREAMS_SECONDS (default: what is left of DEADLINE).
#   SCRIPTS='benchmarks/abft_overhead.py --repeats 21; benchmarks/kmeans_out_of_core.py ...'
#     runs these Python scripts (paths with their arguments, ';'-separated) one after the
#     other, alone on the GPU, after the calibration and the streams and before the tests:
#     script i writes $OUT/script-i.log, and gets $OUT/script-i as its --out where its
#     arguments name none. Each is cut (SIGINT, then KILL) at what is left of DEADLINE.
#   SHARD=I/N runs part I of N of every pytest run's tests (tests/conftest.py --shard):
#     on one GPU the whole suite with the sanitizer takes more than one 600 s call, and
#     SHARD=1/2 and SHARD=2/2 in two calls run each test once.
#   TEST_TIMEOUT=SECONDS interrupts pytest (SIGINT, so it still prints its summary and the
#     failures so far) after that long: a group cut short says so instead of eating the call,
#     and its $OUT/pytest-gpu-i.unreached lists the tests it did not finish, one id a line,
#     for a later call to run, copied into the tree: PYTEST_GROUPS='@FILE -n 12' (pytest >= 8.2
#     reads a file of arguments named with @).
#   GROUP_GPUS='1 2 3' puts pytest group i on GPU number i mod 3 of that list
#     (CUDA_VISIBLE_DEVICES), for machines with several GPUs; the harness and
#     the calibration run on whatever GPUs the script itself was given.
#   INSTALL=0 skips the build (another run of this script made it). The build is
#     for the GPU at hand only, unless TSM2_CUDA_ARCHITECTURES names others.
#   EXTENSION_FROM=WHEEL skips the build too: the compiled extension is taken from
#     a jax_tsm2 wheel (.ci/build-wheel) and the tree's own Python runs with it,
#     uninstalled (1-2 s instead of a 90 s build). Only where ffi/ and
#     CMakeLists.txt are those of the wheel's commit (build_info() names it).
#     Uninstalled, `python -m` imports the package from the current directory,
#     whatever PYTHONPATH says: to route without calibrations, set
#     JAX_TSM2_CALIBRATION=off rather than pointing at another copy.
#   PACK=1 leaves $OUT as one out.tgz, even after a failure (for runners that
#     bring back only a few files).
#   Wheels in .whl/ (dependencies a machine without network lacks, e.g.
#     setuptools-scm for the build, platformdirs) are installed into
#     /tmp/site first and put on PYTHONPATH.
set -uo pipefail
OUT=${OUT:-/tmp/out}
DEADLINE=${DEADLINE:-570}
mkdir -p "$OUT"
if [ "${PACK:-0}" = 1 ]; then
  trap 'tar czf /tmp/gpu_session_out.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* &&
    mv /tmp/gpu_session_out.tgz "$OUT/out.tgz"' EXIT
fi
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
# pytest-xdist workers the smallest visible GPU holds side by side, at GIB_PER_WORKER each.
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | sort -n | head -1)
GPU_WORKERS=$(( ${mib:-0} / 1024 / ${GIB_PER_WORKER:-10} ))
export GPU_WORKERS=$(( GPU_WORKERS > 0 ? GPU_WORKERS : 1 ))
echo "pytest workers for this GPU's memory: GPU_WORKERS=$GPU_WORKERS"

if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

if [ -n "${EXTENSION_FROM:-}" ]; then
  rm -rf /tmp/extension_wheel
  python3 -m zipfile -e "$EXTENSION_FROM" /tmp/extension_wheel || exit 1
  cp /tmp/extension_wheel/jax_tsm2/_tsm2_ext*.so jax_tsm2/ || exit 1
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  echo "extension from $(basename "$EXTENSION_FROM")"
elif [ "${INSTALL:-1}" = 1 ]; then
  t0=$SECONDS
  # Machine code for this GPU only (90a on Hopper, for its warpgroup MMAs):
  # the default list of five architectures takes over ten minutes to compile
  # on a 16-core machine, more than one call.
  if [ -z "${TSM2_CUDA_ARCHITECTURES:-}" ]; then
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
    [ "$cap" = 90 ] && cap=90a
    export TSM2_CUDA_ARCHITECTURES=${cap}-real
  fi
  echo "building for $TSM2_CUDA_ARCHITECTURES"
  python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1 ||
    { tail -40 "$OUT/install.log"; exit 1; }
  echo "install: $((SECONDS - t0)) s"
fi

if [ -n "${CALIBRATE:-}" ]; then
  export JAX_TSM2_CACHE_DIR=${JAX_TSM2_CACHE_DIR:-/tmp/jax_tsm2_cache}
  t0=$SECONDS
  python3 -m jax_tsm2.tune --calibrate --budget "$CALIBRATE" > "$OUT/calibrate.log" 2>&1
  echo "calibrate ($((SECONDS - t0)) s): $(tail -1 "$OUT/calibrate.log")"
  cp "$JAX_TSM2_CACHE_DIR"/calibration-*.json "$OUT/" 2>/dev/null
fi

if [ -n "${STREAMS:-}" ]; then
  t0=$SECONDS
  # Cut at STREAMS_SECONDS (default: what is left of DEADLINE, at least a second:
  # timeout 0 would not cut at all); the JSON keeps the shapes timed by then.
  left=${STREAMS_SECONDS:-$((DEADLINE - SECONDS))}
  [ "$left" -ge 1 ] || left=1
  eval "timeout -s INT -k 15 $left \
    python3 benchmarks/stream_kernels.py $STREAMS --json $OUT/streams.json" \
    > "$OUT/streams.log" 2>&1
  echo "streams ($((SECONDS - t0)) s):"
  grep -v -E '^(WARNING|[IWE][0-9]{4})' "$OUT/streams.log" | tail -40
fi

if [ -n "${SCRIPTS:-}" ]; then
  IFS=';' read -ra scripts <<< "$SCRIPTS"
  for i in "${!scripts[@]}"; do
    read -ra argv <<< "${scripts[$i]}"
    [ "${#argv[@]}" -gt 0 ] || continue
    case " ${argv[*]} " in *" --out "*) ;; *) argv+=(--out "$OUT/script-$i") ;; esac
    left=$((DEADLINE - SECONDS))
    if [ "$left" -lt 10 ]; then
      echo "script $i (${argv[*]}): not started, $left s left before the deadline"
      continue
    fi
    t0=$SECONDS
    timeout -s INT -k 15 "$left" python3 "${argv[@]}" > "$OUT/script-$i.log" 2>&1
    rc=$?
    echo "script $i (${argv[*]}; $((SECONDS - t0)) s, exit $rc):"
    grep -v -E '^(WARNING|[IWE][0-9]{4})' "$OUT/script-$i.log" | tail -20
  done
fi

# pytest, logging into $OUT/$1.log, with the remaining arguments (and SHARD's part),
# under TEST_TIMEOUT when set; the 20 slowest tests are listed, so that the next split
# of the suite can be planned, and $OUT/$1.unreached names the tests a cut left undone.
run_pytest() {
  local name=$1
  shift
  local args=(-q -m gpu -rfE --durations=20 ${SHARD:+--shard "$SHARD"}
    --unreached "$OUT/$name.unreached" "$@")
  if [ -n "${TEST_TIMEOUT:-}" ]; then
    timeout -s INT -k 20 "$TEST_TIMEOUT" python3 -m pytest "${args[@]}" > "$OUT/$name.log" 2>&1
  else
    python3 -m pytest "${args[@]}" > "$OUT/$name.log" 2>&1
  fi
}

# Run $1's summary line, saying so where TEST_TIMEOUT cut it short, and how many
# tests it did not reach.
summary() {
  if grep -q '^!* KeyboardInterrupt !*$' "$OUT/$1.log"; then
    local left="?"
    [ -f "$OUT/$1.unreached" ] && left=$(wc -l < "$OUT/$1.unreached")
    echo "CUT SHORT by TEST_TIMEOUT: $(tail -1 "$OUT/$1.log"); $left tests not reached ($1.unreached)"
  else
    tail -1 "$OUT/$1.log"
  fi
}

if [ "${TESTS:-1}" = 1 ]; then
  if [ "${TIMING:-1}" = 1 ]; then
    t0=$SECONDS
    # The tests that time the GPU first, alone: xdist's workers leave them out.
    run_pytest pytest-timing -m "gpu and timing" tests/
    echo "gpu timing tests ($((SECONDS - t0)) s): $(summary pytest-timing)"
    grep -E '^(FAILED|ERROR)' "$OUT/pytest-timing.log" | head -8
  fi
  t0=$SECONDS
  if [ -n "${PYTEST_GROUPS:-}" ]; then
    IFS=';' read -ra groups <<< "$PYTEST_GROUPS"
    read -ra gpus <<< "${GROUP_GPUS:-}"
    for i in "${!groups[@]}"; do
      (
        if [ "${#gpus[@]}" -gt 0 ]; then
          export CUDA_VISIBLE_DEVICES=${gpus[$((i % ${#gpus[@]}))]}
        fi
        eval "run_pytest pytest-gpu-$i ${groups[$i]}"
      ) &
    done
    wait
    echo "gpu tests ($((SECONDS - t0)) s, ${#groups[@]} groups side by side):"
    for i in "${!groups[@]}"; do
      echo "  pytest-gpu-$i ($(echo ${groups[$i]})): $(summary "pytest-gpu-$i")"
      grep -E '^(FAILED|ERROR)' "$OUT/pytest-gpu-$i.log" | head -8
    done
  else
    run_pytest pytest-gpu ${PYTEST_ARGS:-tests/}
    echo "gpu tests ($((SECONDS - t0)) s): $(summary pytest-gpu)"
  fi
fi

# One harness run into $1 with the remaining arguments; its table and summary last.
bench() {
  local dir=$1 budget=$((DEADLINE - SECONDS - 30)) t0=$SECONDS
  shift
  if [ "$budget" -lt 30 ]; then
    echo "bench $dir: not started, $((DEADLINE - SECONDS)) s left before the deadline"
    return
  fi
  python3 -m jax_tsm2.bench --time-budget "$budget" --out "$OUT/$dir" --plot "$@" \
    > "$OUT/$dir.log" 2>&1
  echo "bench $dir ($((SECONDS - t0)) s, budget $budget s): $*"
  sed -n '/^ *\(family\|case\) /,$p' "$OUT/$dir.log" | tail -60
}

if [ "${BENCH:-1}" = 1 ]; then
  if [ -n "${BENCH_RUNS:-}" ]; then
    IFS=';' read -ra runs <<< "$BENCH_RUNS"
    for i in "${!runs[@]}"; do
      eval "bench bench-$i ${runs[$i]}"
    done
  else
    bench bench "$@"
  fi
fi
