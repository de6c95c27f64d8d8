#!/usr/bin/env bash
# Make sure OpenSSH's server and client are here, for the SSH worker tests
# (tests/test_distributed_ssh.py starts a private sshd on a loopback port; nothing here configures
# or starts the system's own sshd).
#
# Quick and silent when both are present. Elsewhere we only explain what to do.
set -euo pipefail
. "$(dirname "$0")/debian.sh"

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

if have sshd && have ssh && have ssh-keygen; then
    exit 0
fi

if ! is_debian; then
    echo "error: OpenSSH (sshd, ssh, ssh-keygen) is missing and this is not a Debian machine." >&2
    echo "The Distributed SSH worker tests start a private sshd on 127.0.0.1: install" >&2
    echo "OpenSSH's server and client with your package manager (sshd: on PATH or /usr/sbin)." >&2
    exit 1
fi

need_root OpenSSH

echo "Installing Debian's openssh-server and openssh-client for the SSH worker tests ..." >&2
# policy-rc.d: the package's own sshd service must not start now (the tests run their own
# sshd). Debian's package still enables it for the next boot; disable it if you do not want it.
policy=/usr/sbin/policy-rc.d
own_policy=""
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod +x "$policy"
    own_policy=1
fi
trap '[ -z "$own_policy" ] || $sudo rm -f "$policy"' EXIT
apt_get -q update >&2
apt_get -q install -y --no-install-recommends \
    openssh-server openssh-client >&2
if ! have sshd || ! have ssh; then
    echo "error: openssh-server installed, but sshd or ssh is still missing." >&2
    exit 1
fi
