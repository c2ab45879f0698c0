#!/usr/bin/env bash
# Debian packages the browser tests need (headless Chromium). Playwright never downloads
# its own browser here: the tests drive /usr/bin/chromium. Skipped when already present
# or when this is not a root Debian machine (the browser tests then skip with a reason).
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if ! command -v apt-get >/dev/null || [ "$(id -u)" != 0 ]; then
  echo "note: /usr/bin/chromium missing and cannot apt-get it; browser tests will be skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium chromium-driver >/dev/null
