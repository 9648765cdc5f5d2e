#!/usr/bin/env bash
# Install notes-search into ./.venv (idempotent).
#   ./install.sh          runtime only
#   ./install.sh --dev    plus test tools
set -euo pipefail
cd "$(dirname "$0")"

dev=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    -h|--help) sed -n '2,4p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option: $arg" >&2; exit 2 ;;
  esac
done

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
extra=""
[ "$dev" = 1 ] && extra="[dev]"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extra}"

# Test tools outside PyPI: ripgrep backs `notes-search grep` (a pure-Python fallback exists,
# but the tests exercise both paths).
if [ "$dev" = 1 ] && ! command -v rg >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq ripgrep >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq ripgrep >/dev/null 2>&1; }) \
      || echo "install.sh: could not install ripgrep; grep tests will use the Python fallback only" >&2
  else
    echo "install.sh: ripgrep (rg) not found; install it for the full grep tests" >&2
  fi
fi

# Fail loudly when the vector extension cannot be loaded: without it nothing works.
.venv/bin/python - <<'PY'
import sys
import apsw, sqlite_vec
try:
    conn = apsw.Connection(":memory:")
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    version = conn.execute("select vec_version()").fetchone()[0]
except Exception as exc:  # noqa: BLE001 - any failure here is fatal for the install
    sys.exit(f"install.sh: sqlite-vec cannot be loaded into SQLite {apsw.sqlite_lib_version()}: {exc}")
print(f"notes-search installed: SQLite {apsw.sqlite_lib_version()}, sqlite-vec {version}")
PY
