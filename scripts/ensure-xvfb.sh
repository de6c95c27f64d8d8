#!/usr/bin/env bash
# Make sure Xvfb and xdpyinfo are here: the kernel's --xvfb option (headless graphics, see
# docs/shared-servers.md) starts Xvfb, and tests/test_xvfb.py checks the display from a cell
# with xdpyinfo.
#
# Debian's xvfb and x11-utils packages. Quick and silent when both are present. Elsewhere we only
# explain what to do.
set -euo pipefail
. "$(dirname "$0")/debian.sh"

xvfb="${JUTUL_JKERNEL_XVFB_BIN:-Xvfb}"

if command -v "$xvfb" >/dev/null 2>&1 && command -v xdpyinfo >/dev/null 2>&1; then
    exit 0
fi

if ! is_debian; then
    echo "error: Xvfb or xdpyinfo not found and this is not a Debian-family machine." >&2
    echo "Headless graphics (--xvfb) and its test need them: install your distribution's" >&2
    echo "Xvfb (xorg-x11-server-Xvfb on Fedora) and xdpyinfo (xorg-x11-utils / x11-utils)." >&2
    exit 1
fi

need_root Xvfb

echo "Installing Debian's xvfb and x11-utils for headless graphics (--xvfb) ..." >&2
apt_get -q update >&2
apt_get -q install -y --no-install-recommends xvfb x11-utils >&2
for tool in "$xvfb" xdpyinfo; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "error: the xvfb and x11-utils packages installed, but $tool is still missing." >&2
        exit 1
    fi
done
