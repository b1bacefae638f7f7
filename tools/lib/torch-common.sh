# Shared by the opt-in torch scripts (tools/e2e-torch, tools/e2e-triton, tools/e2e-gpu,
# tests/bench/kernel-cache-bench); source it from the repository root.
#
#   PT2CACHED / PT2CACHE_CLI      binaries (default: tools/build, then build/...)
#   PT2CACHE_CXX_LAUNCHER         pt2cache-cxx (default: next to the CLI, in
#                                 build/client/cxx/, when it exists)

# The binaries: $PT2CACHED (skips tools/build), else tools/build's.
torch_binaries() {
  if [ -z "${PT2CACHED:-}" ]; then
    tools/build
    PT2CACHED=build/daemon/pt2cached
    PT2CACHE_CLI=build/client/cli/pt2cache
  fi
  PT2CACHED=$(realpath "$PT2CACHED")
  PT2CACHE_CLI=$(realpath -m "${PT2CACHE_CLI:-$(dirname "$PT2CACHED")/../client/cli/pt2cache}")
  if [ -z "${PT2CACHE_CXX_LAUNCHER:-}" ]; then
    local guess
    guess=$(realpath -m "$(dirname "$PT2CACHED")/../client/cxx/pt2cache-cxx")
    [ -x "$guess" ] && PT2CACHE_CXX_LAUNCHER=$guess
  fi
  PT2CACHE_CXX_LAUNCHER=${PT2CACHE_CXX_LAUNCHER:-}
}

# .venv/torch with torch, triton (comes with torch), redis-py and numpy. The
# first run downloads several GB when only PyPI's CUDA build can be had.
torch_venv() {
  venv=.venv/torch
  if ! "$venv/bin/python" -c "import torch, redis" 2>/dev/null; then
    echo "$0: creating $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check redis numpy
    # The CPU-only build is a fraction of the size; fall back to PyPI's default.
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --retries 0 --timeout 15 \
      torch --index-url https://download.pytorch.org/whl/cpu ||
      "$venv/bin/python" -m pip install -q --disable-pip-version-check torch
  fi
  echo "$0: $("$venv/bin/python" -c 'import torch, redis; print("torch", torch.__version__, "redis-py", redis.__version__)')" >&2
}

# The daemon reads TORCHINDUCTOR_* itself (its own remote tier): none of the
# caller's may reach it (a remote tier pointing at its own socket would loop),
# nor the compile processes the scripts start.
torch_unset_vars() {
  unset_vars=()
  local name
  for name in $(compgen -e); do
    case $name in
      TORCHINDUCTOR_* | TORCH_COMPILE_* | PT2CACHE_* | TRITON_* | CXX) unset_vars+=(-u "$name") ;;
    esac
  done
}

# start_daemon DIR [ARGS...]: pt2cached on DIR/s with cache DIR/cache, log
# DIR/daemon.log, config from DIR/config; appends its pid to daemon_pids.
daemon_pids=()
start_daemon() {
  local dir=$1
  shift
  mkdir -p -m 700 "$dir"
  env "${unset_vars[@]}" XDG_CONFIG_HOME="$dir/config" \
    "$PT2CACHED" --socket "$dir/s" --cache-dir "$dir/cache" --log-level info "$@" \
    >"$dir/daemon.log" 2>&1 &
  daemon_pids+=($!)
  local _
  for _ in $(seq 200); do [ -S "$dir/s" ] && return 0; sleep 0.05; done
  cat "$dir/daemon.log" >&2
  echo "$0: pt2cached did not start" >&2
  return 1
}

stop_daemons() {
  local pid
  for pid in "${daemon_pids[@]}"; do
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  done
  daemon_pids=()
}

# run_mlp OUT TMPDIR CACHE_DIR [VAR=VALUE...]: one tools/torch-mlp.py run (in
# the torch venv, the caller's TORCHINDUCTOR_*/PT2CACHE_*/TRITON_*/CXX
# removed, then VAR=VALUE... set); writes OUT.json (its result), OUT.err and
# OUT.cxx.json (the counts of tools/lib/logging-cxx's log OUT.cxx.jsonl,
# zeros when the run used no logging compiler).
run_mlp() {
  local out=$1 tmp=$2 cache=$3
  shift 3
  mkdir -p "$tmp" "$cache"
  env "${unset_vars[@]}" TMPDIR="$tmp" TORCHINDUCTOR_CACHE_DIR="$cache" \
    PYTHONPATH="$root/client/python/src" PT2CACHE_LOG_CXX_FILE="$out.cxx.jsonl" "$@" \
    "$venv/bin/python" "$root/tools/torch-mlp.py" >"$out.json" 2>"$out.err" || {
      cat "$out.err" >&2; echo "$0: the torch.compile run $out failed" >&2; return 1; }
  python3 "$root/tools/summarise-cxx-log.py" --json "$out.cxx.jsonl" >"$out.cxx.json"
}
