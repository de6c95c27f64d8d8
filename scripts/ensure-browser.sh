#!/usr/bin/env bash
# Make sure a Chromium the JupyterLab browser test (tests/test_jupyterlab.py) can drive is here.
#
# Playwright drives Debian's chromium package (/usr/bin/chromium, or $JUTUL_JKERNEL_CHROMIUM);
# we never run `playwright install`, whose browser download this machine's closed network refuses.
# Quick and silent when the browser is already present. Elsewhere we only explain what to do.
set -euo pipefail
. "$(dirname "$0")/debian.sh"

chromium="${JUTUL_JKERNEL_CHROMIUM:-/usr/bin/chromium}"

if [ -x "$chromium" ]; then
    exit 0
fi

if ! is_debian; then
    echo "error: $chromium not found and this is not a Debian-family machine." >&2
    echo "The JupyterLab browser test needs Chromium: install it with your package manager and" >&2
    echo "set JUTUL_JKERNEL_CHROMIUM to its executable (e.g. /usr/bin/chromium-browser)." >&2
    exit 1
fi

need_root Chromium

echo "Installing Debian's chromium for the JupyterLab browser test ..." >&2
apt_get -q update >&2
apt_get -q install -y --no-install-recommends chromium >&2
if [ ! -x "$chromium" ]; then
    echo "error: the chromium package installed, but $chromium is still missing." >&2
    exit 1
fi
"$chromium" --version
