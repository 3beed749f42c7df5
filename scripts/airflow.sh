#!/usr/bin/env bash
# Apache Airflow for the fleet DAG (deploy/airflow/): an environment of its own, cached outside the checkout.
# Usage: scripts/airflow.sh build | check | status | run ARGS...
#   build    apache-airflow (and the kubernetes client) with every dependency pinned by deploy/airflow/constraints.txt, in
#            $K3_AIRFLOW_CACHE/<version>/venv, linked as .venv-airflow (skipped when its stamp matches)
#   check    exit 0 when the environment is built, else print why and exit 1
#   status   print what is built and where
#   run      `airflow ARGS...` from that environment
set -euo pipefail

ENGINE=airflow
# shellcheck source=scripts/_engine.sh
. "$(dirname "$0")/_engine.sh"

# Pinned: bump the version (or a pin in the constraints file) and `build` reinstalls (the stamp no longer matches).
AIRFLOW_VERSION="3.1.8"
# The Kubernetes client, whose models check deploy/k8s/ manifests (scripts/k8s_check.py): kept here, not in the kit.
KUBERNETES_VERSION="37.0.2"
CONSTRAINTS="$ROOT/deploy/airflow/constraints.txt"

# Airflow and its ~130 pinned packages (~180 MB) live outside the checkout, keyed by version, so a fresh clone on
# the same machine (or a CI cache restoring this folder) reuses them; .venv-airflow in the checkout points at it.
# The kit is not installed there: the DAG's tasks run the kit's own `k3` (K3_BIN), so Airflow's pins and the
# kit's never have to agree.
CACHE="${K3_AIRFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k3kit-airflow}"
VENV="$CACHE/$AIRFLOW_VERSION/venv"
LINK="$ROOT/.venv-airflow"
STAMP="$VENV/.stamp-airflow"

stamp_text() {
  printf 'apache-airflow==%s\nkubernetes==%s\nconstraints sha256 %s\n' "$AIRFLOW_VERSION" "$KUBERNETES_VERSION" \
    "$(sha256sum "$CONSTRAINTS" | cut -c1-16)"
}

cmd_build() {
  local started=$SECONDS want; want="$(stamp_text)"
  cached_venv
  if stamp_matches "$STAMP" "$want"; then log "up to date (apache-airflow $AIRFLOW_VERSION in $VENV)"; return; fi
  log "installing apache-airflow $AIRFLOW_VERSION with the pins of ${CONSTRAINTS#"$ROOT"/} (about a minute)"
  "$VENV/bin/python" -m pip install --quiet "apache-airflow==$AIRFLOW_VERSION" "kubernetes==$KUBERNETES_VERSION" \
    -c "$CONSTRAINTS"
  "$VENV/bin/airflow" version >/dev/null 2>&1 || { log "airflow does not start in $VENV"; exit 1; }
  printf '%s' "$want" >"$STAMP"
  log "installed in $((SECONDS - started)) s: $LINK -> $VENV"
}

not_ready_reason() {  # prints why the environment cannot be used, nothing when it can
  if [ ! -x "$VENV/bin/airflow" ]; then echo "the Airflow environment $VENV is missing"
  elif ! stamp_matches "$STAMP" "$(stamp_text)"; then
    echo "apache-airflow $AIRFLOW_VERSION with the pins of ${CONSTRAINTS#"$ROOT"/} is not installed in $VENV"
  elif [ "$(readlink "$LINK" 2>/dev/null)" != "$VENV" ]; then echo "${LINK#"$ROOT"/} does not point at $VENV"
  fi
}

cmd_status() {
  echo "venv:    $VENV $( [ -x "$VENV/bin/python" ] && echo present || echo missing) (linked as ${LINK##*/})"
  echo "airflow: $(stamp_matches "$STAMP" "$(stamp_text)" && echo "$AIRFLOW_VERSION" || echo "not installed")"
  echo "cache:   $CACHE"
}

case "${1:-}" in
  build) cmd_build ;;
  check) cmd_check ;;
  status) cmd_status ;;
  run) shift; require_ready; exec "$VENV/bin/airflow" "$@" ;;
  *) usage ;;
esac
