#!/usr/bin/env bash
# Prepare the offline demo data from the Python 3.11 documentation: dolma2 token files in data/demo
# and the demo BPE (4,096 entries, shipped in olmoablate/data/) token files in data/demo/bpe4096.
#
#   bash scripts/prepare-data.sh [--out data/demo] [--max-tokens N] [...]   (args go to `data prepare`)
#
# Idempotent: installs the Debian package python3.11-doc only when its files are missing, and
# `data prepare` keeps an existing folder whose manifest and checksums already match.
# Why a Debian package: nodes here reach package registries but no dataset hub, and nothing may be
# downloaded at training time. Without root, the .deb is fetched with `apt-get download` (no root
# needed) and unpacked under data/.cache/, then used via --source-dir.
set -euo pipefail

PKG=python3.11-doc
DOC_DIR="${OLMOABLATE_PYDOCS_DIR:-/usr/share/doc/python3.11/html/_sources}"  # override: tests
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${OLMOABLATE_DATA_CACHE:-data/.cache}"

# The Python that has olmoablate: $PYTHON, else the active venv, else the repo's .venv.
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -n "${VIRTUAL_ENV:-}" ]]; then
    PYTHON=python
  elif [[ -x "$REPO_ROOT/.venv/bin/python" ]]; then
    PYTHON="$REPO_ROOT/.venv/bin/python"
  else
    PYTHON=python3
  fi
fi

have_docs() { compgen -G "$1/*.rst.txt" > /dev/null; }

SOURCE_ARGS=()
# An explicit --source-dir from the caller wins: no package needed.
if [[ " $* " == *" --source-dir "* || " $* " == *" --source-dir="* ]]; then
  :
elif have_docs "$DOC_DIR"; then
  echo "prepare-data: $PKG already installed ($DOC_DIR)"
elif [[ "$(id -u)" == 0 ]] && command -v apt-get > /dev/null; then
  echo "prepare-data: installing Debian package $PKG (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$PKG" > /dev/null
  have_docs "$DOC_DIR" || { echo "prepare-data: $PKG installed but $DOC_DIR is empty" >&2; exit 2; }
elif command -v apt-get > /dev/null && command -v dpkg-deb > /dev/null; then
  # Not root: download the .deb (allowed for any user) and unpack it locally.
  LOCAL_DOCS="$CACHE_DIR/$PKG${DOC_DIR}"
  if ! have_docs "$LOCAL_DOCS"; then
    echo "prepare-data: not root, so not installing $PKG; unpacking its .deb into $CACHE_DIR instead"
    mkdir -p "$CACHE_DIR"
    if ! (cd "$CACHE_DIR" && apt-get download "$PKG" > /dev/null); then
      echo "prepare-data: cannot download $PKG (not root, apt-get download failed). Fix: run this" \
        "script as root, or 'sudo apt-get install $PKG', or pass --source-dir DIR with *.rst.txt files" >&2
      exit 2
    fi
    dpkg-deb -x "$(ls -t "$CACHE_DIR"/${PKG}_*.deb | head -n 1)" "$CACHE_DIR/$PKG"
  fi
  SOURCE_ARGS=(--source-dir "$LOCAL_DOCS")
else
  echo "prepare-data: $DOC_DIR missing and apt-get is unavailable (not Debian/Ubuntu, or not root)." \
    "Fix: install the Debian package $PKG, or pass --source-dir DIR containing *.rst.txt files" >&2
  exit 2
fi

exec "$PYTHON" -m olmoablate data prepare "${SOURCE_ARGS[@]}" "$@"
