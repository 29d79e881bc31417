#!/usr/bin/env bash
# Installs what the tests need beyond the Python environment: promtool and prometheus
# (Debian's `prometheus` package ships both) for tests/deploy; `ip` (iproute2) and `unshare`
# (util-linux) for the slow-DNS test's network namespace. Idempotent: does nothing when all are on PATH.
set -euo pipefail
if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 \
   && command -v ip >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends prometheus iproute2 util-linux >/dev/null
command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v ip >/dev/null && command -v unshare >/dev/null
