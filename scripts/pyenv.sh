# Sourced by ./tailor and ./run-tests: create or refresh the project's virtualenv from requirements.lock.
# Installs only from the package registries (PyPI; Debian's python3-venv when venv is missing).
tailor_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAILOR_VENV="${TAILOR_VENV:-$tailor_root/.venv}"

tailor_python() {
  for py in python3.13 python3.12 python3.11 python3; do
    if command -v "$py" >/dev/null && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  echo "tailor: error: Python >= 3.11 is required" >&2; return 1
}

tailor_ensure_venv() {
  local want stamp py
  want="$(sha1sum "$tailor_root/requirements.lock" | cut -d' ' -f1)"
  stamp="$TAILOR_VENV/.requirements.sha1"
  if [ -x "$TAILOR_VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  py="$(tailor_python)" || return 1
  echo "tailor: setting up $TAILOR_VENV (first use; pinned dependencies from requirements.lock)" >&2
  if ! "$py" -m venv "$TAILOR_VENV" 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get install -y -q python3-venv >&2 && "$py" -m venv "$TAILOR_VENV"
    else
      echo "tailor: error: '$py -m venv' failed; install python3-venv" >&2; return 1
    fi
  fi
  "$TAILOR_VENV/bin/pip" install -q --disable-pip-version-check -r "$tailor_root/requirements.lock" >&2 || return 1
  echo "$want" > "$stamp"
}
