#!/usr/bin/env bash
# Install notes-search into ./.venv (idempotent).
#   ./install.sh                 runtime only
#   ./install.sh --dev           plus test tools
#   ./install.sh --cron [CONFIG] plus a crontab line running `sync --quiet` every minute
#                                (CONFIG: default the one `notes-search config path` finds here)
set -euo pipefail
caller_dir=$PWD  # a relative CONFIG, and config discovery, mean the caller's folder
cd "$(dirname "$0")"

dev=0
cron=0
cron_config=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dev) dev=1 ;;
    --cron)
      cron=1
      if [ $# -gt 1 ] && [ "${2#-}" = "$2" ]; then cron_config=$2; shift; fi ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option: $1" >&2; exit 2 ;;
  esac
  shift
done

# The cron fallback poller (for machines without inotify or a watcher running): PATH in the crontab header, our line replaced, never duplicated.
install_cron() {
  local cfg exe log_dir line table path_dirs
  exe="$PWD/.venv/bin/notes-search"
  if [ -n "$1" ]; then
    cfg=$(cd -- "$caller_dir" && realpath -- "$1") || exit 1
  else  # the config every command run from the caller's folder would use
    cfg=$(cd -- "$caller_dir" && "$exe" config path | sed -n 1p) || exit 1
    cfg=$(cd -- "$caller_dir" && realpath -- "$cfg") || exit 1
  fi
  [ -f "$cfg" ] || { echo "install.sh: --cron: config $cfg not found" >&2; exit 1; }
  log_dir="$(dirname -- "$cfg")/log"
  # the user config's folder holds config only: its log goes where `init` put the index
  if [ "$cfg" = "$(realpath -m -- "${XDG_CONFIG_HOME:-$HOME/.config}/notes-search/config.yaml")" ]; then
    log_dir="${XDG_DATA_HOME:-$HOME/.local/share}/notes-search/log"
  fi
  mkdir -p -- "$log_dir"
  shq() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
  line="* * * * * $(shq "$exe") --config $(shq "$cfg") sync --quiet >> $(shq "$log_dir/notes_sync_cron.log") 2>&1 # notes-search sync"
  line=${line//%/\\%}
  table=$(crontab -l 2>/dev/null | grep -vF -- "--config $(shq "$cfg" | sed 's/%/\\%/g') sync --quiet" || true)
  if ! printf '%s\n' "$table" | grep -q '^PATH='; then
    path_dirs="/usr/local/bin:/usr/bin:/bin"
    case ":$path_dirs:" in *":$(dirname -- "$(command -v git)"):"*) ;; *) path_dirs="$(dirname -- "$(command -v git)"):$path_dirs" ;; esac
    table=$(printf 'PATH=%s\n%s' "$path_dirs" "$table")
  fi
  printf '%s\n%s\n' "$table" "$line" | crontab -
  echo "cron: every minute: $exe --config $cfg sync --quiet"
}

# Checked before anything is installed: one line saying how to get crontab, not a pip run
# that ends in `crontab: command not found`.
if [ "$cron" = 1 ] && ! command -v crontab >/dev/null 2>&1; then
  echo "install.sh: --cron needs crontab, which is not installed (Debian/Ubuntu: apt-get install cron; Fedora: dnf install cronie), or use the systemd timer docs/notes-search-sync.timer" >&2
  exit 1
fi

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

# The project's own bytecode, written now: where PYTHONDONTWRITEBYTECODE is set (agents'
# sandboxes) every command compiled it afresh, ~130 ms of a 0.5 s query. A file edited later
# is still compiled from its source (Python checks the timestamp).
.venv/bin/python -m compileall -q -j 0 indexer search hooks >/dev/null

# The language identifier's tables, uncompressed in the cache folder: the first query then maps
# them instead of decompressing py3langid's model (best effort: otherwise its first use writes them).
.venv/bin/python -c "from indexer import language; language.preload()" >/dev/null 2>&1 || true

if [ "$cron" = 1 ]; then
  install_cron "$cron_config"
fi
