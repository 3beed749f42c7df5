# shellcheck shell=bash
# The prelude shared by scripts/realengine.sh, scripts/realvllm.sh and scripts/airflow.sh; sourced by them, never run on its own.
# The sourcing script sets ENGINE (its name: the log prefix, the make target, scripts/$ENGINE.sh) before sourcing,
# and VENV (and LINK, for cached_venv), DEFAULT_PORT and a `not_ready_reason` function before the port and
# readiness helpers.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { printf '%s: %s\n' "$ENGINE" "$*" >&2; }

usage() {  # the calling script's header comment (after the shebang, up to the first other line), then exit 2
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0" >&2
  exit 2
}

pick_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then echo "$candidate"; return; fi
  done
  log "no python3.11 or python3 on PATH"; exit 1
}

cached_venv() {  # cached_venv: create $VENV (outside the checkout) when missing, and point the checkout's $LINK at it
  if [ ! -x "$VENV/bin/python" ]; then
    local python; python="$(pick_python)"
    log "creating $VENV with $python"
    mkdir -p "$(dirname "$VENV")"
    "$python" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
  fi
  if [ "$(readlink "$LINK" 2>/dev/null)" != "$VENV" ]; then
    rm -f "$LINK"
    ln -s "$VENV" "$LINK"
  fi
}

stamp_matches() {  # stamp_matches FILE EXPECTED_TEXT
  [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]
}

port_free() {  # port_free PORT: exit 0 when 127.0.0.1:PORT can be bound now
  "$VENV/bin/python" -c 'import socket, sys; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.close()' \
    "$1" 2>/dev/null
}

free_port() {
  "$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

pick_port() {  # pick_port [PORT]: PORT when given, else DEFAULT_PORT when free, else any free port
  if [ -n "${1:-}" ]; then echo "$1"
  elif port_free "$DEFAULT_PORT"; then echo "$DEFAULT_PORT"
  else free_port
  fi
}

cmd_check() {  # exit 0 when serve can start, else print why and exit 1
  local why; why="$(not_ready_reason)"
  if [ -n "$why" ]; then echo "$why: run 'make $ENGINE' (scripts/$ENGINE.sh build)"; exit 1; fi
}

require_ready() {  # the same before serving, on stderr
  local why; why="$(not_ready_reason)"
  if [ -n "$why" ]; then log "$why: run 'make $ENGINE' (scripts/$ENGINE.sh build) first"; exit 1; fi
}
