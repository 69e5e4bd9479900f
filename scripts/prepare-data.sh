#!/usr/bin/env bash
# Prepare the offline demo data from the Python 3.11 documentation: dolma2 token files in data/demo
# and the demo BPE (4,096 entries, shipped in olmoablate/data/) token files in data/demo/bpe4096.
#
#   bash scripts/prepare-data.sh [--out data/demo] [--max-tokens N] [...]   (args go to `data prepare`)
#
# Idempotent: `data prepare` keeps an existing folder whose manifest and checksums already match.
# Which corpus: the Debian package python3.11-doc at the version the shipped BPE was trained on
# (PIN below; olmoablate/data/corpus.py pins its content hash). Bookworm's main archive has
# 3.11.2-6+deb12u8 (four documents differ), the security archive 3.11.2-6+deb12u9: when the
# installed package is not PIN (or none is), the PIN .deb is fetched with `apt-get download` (no
# root needed; the system package is left as it is) and unpacked under data/.cache/, then used
# via --source-dir. Only when PIN cannot be downloaded does another version serve, with a warning
# (the manifest records the version and the corpus's sha256 either way).
# Why a Debian package: nodes here reach package registries but no dataset hub, and nothing may be
# downloaded at training time.
set -euo pipefail

PKG=python3.11-doc
PIN=3.11.2-6+deb12u9
DEFAULT_DOC_DIR=/usr/share/doc/python3.11/html/_sources
DOC_DIR="${OLMOABLATE_PYDOCS_DIR:-$DEFAULT_DOC_DIR}"  # override: tests
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${OLMOABLATE_DATA_CACHE:-data/.cache}"
PIN_ROOT="$CACHE_DIR/${PKG}_${PIN}"
PIN_DOCS="$PIN_ROOT$DEFAULT_DOC_DIR"

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
# The package version of the documents in folder $1, from the package's own changelog next to them
# (<root>/usr/share/doc/python3.11-doc/changelog.Debian.gz; installed or unpacked alike).
version_at() {
  local log="$1/../../../$PKG/changelog.Debian.gz"
  [[ -f "$log" ]] && gzip -dc "$log" 2> /dev/null | head -n 1 | sed -n 's/^[^(]*(\([^)]*\)).*/\1/p' || true
}
# Download and unpack $PKG=$1 into folder $2 (no root needed); false when apt cannot get it.
unpack() {
  local ver=$1 root=$2 tmp log
  command -v apt-get > /dev/null && command -v dpkg-deb > /dev/null || return 1
  mkdir -p "$CACHE_DIR"
  tmp=$(mktemp -d "$CACHE_DIR/.download.XXXXXX")
  log="$tmp/apt.log"
  if ! (cd "$tmp" && apt-get download "$PKG=$ver") > "$log" 2>&1; then
    # a fresh machine may not know the version yet: refresh the lists when allowed to
    if [[ "$(id -u)" == 0 ]] && apt-get update -qq > "$log" 2>&1 &&
      (cd "$tmp" && apt-get download "$PKG=$ver") > "$log" 2>&1; then
      :
    else
      tail -n 2 "$log" >&2
      rm -rf "$tmp"
      return 1
    fi
  fi
  rm -rf "$root.partial"
  dpkg-deb -x "$tmp"/${PKG}_*.deb "$root.partial" && rm -rf "$root" && mv "$root.partial" "$root"
  rm -rf "$tmp"
}

SOURCE_ARGS=()
installed=""
have_docs "$DOC_DIR" && installed=$(version_at "$DOC_DIR")
# An explicit --source-dir from the caller wins: no package needed.
if [[ " $* " == *" --source-dir "* || " $* " == *" --source-dir="* ]]; then
  :
elif [[ -n "$installed" && "$installed" == "$PIN" ]]; then
  echo "prepare-data: $PKG $PIN installed ($DOC_DIR), the pinned corpus"
  [[ "$DOC_DIR" == "$DEFAULT_DOC_DIR" ]] || SOURCE_ARGS=(--source-dir "$DOC_DIR")
elif have_docs "$PIN_DOCS" || {
  echo "prepare-data: $PKG ${installed:-not} installed${installed:+ (not the pinned $PIN)};" \
    "unpacking $PKG=$PIN into $PIN_ROOT (apt-get download; the system package is left as it is)"
  unpack "$PIN" "$PIN_ROOT"
}; then
  echo "prepare-data: using the pinned corpus $PKG $PIN from $PIN_ROOT"
  SOURCE_ARGS=(--source-dir "$PIN_DOCS")
elif have_docs "$DOC_DIR"; then
  echo "prepare-data: WARNING: the pinned $PKG $PIN cannot be downloaded; using the installed" \
    "${installed:-version (unknown)} ($DOC_DIR): the demo's numbers will differ from the pinned corpus's" >&2
  [[ "$DOC_DIR" == "$DEFAULT_DOC_DIR" ]] || SOURCE_ARGS=(--source-dir "$DOC_DIR")
elif [[ "$(id -u)" == 0 ]] && command -v apt-get > /dev/null; then
  echo "prepare-data: WARNING: the pinned $PKG $PIN cannot be downloaded; installing the" \
    "archive's version (apt-get): the demo's numbers will differ from the pinned corpus's" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$PKG" > /dev/null
  have_docs "$DOC_DIR" || { echo "prepare-data: $PKG installed but $DOC_DIR is empty" >&2; exit 2; }
else
  echo "prepare-data: $DOC_DIR missing and $PKG $PIN cannot be downloaded (no apt-get, or the" \
    "archive lacks it). Fix: install the Debian package $PKG, or pass --source-dir DIR containing" \
    "*.rst.txt files" >&2
  exit 2
fi

exec "$PYTHON" -m olmoablate data prepare "${SOURCE_ARGS[@]}" "$@"
