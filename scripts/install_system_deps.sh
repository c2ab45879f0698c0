#!/usr/bin/env bash
# Debian packages `make install` needs before pip runs:
# - chromium (+ driver) for the browser tests: Playwright never downloads its own browser
#   here, the tests drive /usr/bin/chromium;
# - espeak-ng, which speaks the speech demo's and the speech tests' clips offline;
# - cmake and a C/C++ compiler: llama-cpp-python (the `gguf` extra) is built from its
#   source distribution, llama.cpp included.
# - postgresql (the server: initdb, pg_ctl): the store tests run on a private cluster
#   besides SQLite (tests/store_backends.py).
# Only what is missing is installed; when this is not a root Debian machine it says what is
# missing and carries on (the browser, speech and PostgreSQL store tests then skip with a reason,
# `tunelab demo --modality speech` says how to install espeak-ng, and pip's build of
# llama-cpp-python needs cmake and g++ from somewhere else).
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium chromium-driver)
command -v espeak-ng >/dev/null || missing+=(espeak-ng)
command -v cmake >/dev/null || missing+=(cmake)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
{ command -v gcc >/dev/null && command -v g++ >/dev/null && command -v make >/dev/null; } || missing+=(build-essential)
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if ! command -v apt-get >/dev/null || [ "$(id -u)" != 0 ]; then
  echo "note: missing ${missing[*]} and cannot apt-get them here; install them yourself" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
