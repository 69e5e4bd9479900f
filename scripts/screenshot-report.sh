#!/usr/bin/env bash
# Render a report.html in headless Chromium and save a screenshot, to check offline that the
# self-contained report (base64 plots, no external assets) really displays.
#
#   scripts/screenshot-report.sh results/<spec>/report.html [out.png] [height]
#
# Needs Debian's `chromium` (apt-get install chromium). Network is disabled for the page's sake
# too: --disable-background-networking, a throwaway profile, file:// URL only.
set -euo pipefail
html="${1:?usage: $0 report.html [out.png] [height]}"
out="${2:-${html%.html}.png}"
height="${3:-3000}"
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [[ -z "$browser" ]]; then
  echo "error: chromium not found (apt-get install chromium)" >&2
  exit 2
fi
[[ -f "$html" ]] || { echo "error: $html: no such file" >&2; exit 2; }
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
abs_html="$(cd "$(dirname "$html")" && pwd)/$(basename "$html")"
abs_out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --user-data-dir="$profile" \
  --hide-scrollbars --screenshot="$abs_out" --window-size="1200,${height}" "file://${abs_html}" \
  >/dev/null 2>&1
[[ -s "$abs_out" ]] || { echo "error: no screenshot written" >&2; exit 1; }
echo "$abs_out"
