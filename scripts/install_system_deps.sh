#!/usr/bin/env bash
# Debian packages the tests and demos need: headless Chromium for the browser tests (Playwright
# never downloads its own browser here: the tests drive /usr/bin/chromium) and espeak-ng, which
# speaks the speech demo's and the speech tests' clips offline. Skipped when already present
# or when this is not a root Debian machine (the browser and speech tests then skip with a
# reason, and `tunelab demo --modality speech` says how to install espeak-ng).
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium chromium-driver)
command -v espeak-ng >/dev/null || missing+=(espeak-ng)
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if ! command -v apt-get >/dev/null || [ "$(id -u)" != 0 ]; then
  echo "note: cannot apt-get ${missing[*]}; browser tests (chromium) or speech tests and the speech demo (espeak-ng) will be skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
