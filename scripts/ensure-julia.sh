#!/usr/bin/env bash
# Make sure a Julia the kernel can use is on this machine.
#
# Debian bookworm has no julia package; bullseye's julia 1.5.3 (and its dependencies) install
# cleanly on it. A private apt sources file (the machine's own sources plus a copy of their
# first stanza with `Suites: bullseye`) keeps the system's sources untouched. libunwind8 must
# be bullseye's 1.3.2: with bookworm's 1.6.2, Julia 1.5.3 segfaults while collecting an
# InterruptException's backtrace (inside libunwind's dwarf_search_unwind_table).
# Elsewhere we only explain what to do: installing Julia is the user's choice (juliaup).
# A julia already on PATH (juliaup's, or the one julia-actions/setup-julia puts there in CI) is
# always used as it is; only Debian's own julia package gets the libunwind check.
set -euo pipefail
. "$(dirname "$0")/debian.sh"

julia_bin="${JUTUL_JKERNEL_JULIA:-julia}"

unwind_ok() {
    # Only Debian's 1.5.3 build needs the old libunwind.
    command -v dpkg-query >/dev/null 2>&1 || return 0
    local v
    v=$(dpkg-query -W -f='${Version}' libunwind8 2>/dev/null || true)
    [ -z "$v" ] || [ "$v" = "1.3.2-2" ] || ! dpkg-query -W julia >/dev/null 2>&1
}

if command -v "$julia_bin" >/dev/null 2>&1 && unwind_ok; then
    # Debian's julia with the right libunwind: keep a later upgrade from bringing the crash back.
    if dpkg-query -W julia >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
            && ! apt-mark showhold 2>/dev/null | grep -qx libunwind8; then
        apt-mark hold libunwind8 >/dev/null
    fi
    exit 0
fi

if ! is_debian; then
    echo "error: '$julia_bin' was not found on PATH and this is not a Debian-family machine." >&2
    echo "Install Julia 1.6 or newer with juliaup (https://julialang.org/install/), or set" >&2
    echo "JUTUL_JKERNEL_JULIA to the julia executable you want the kernel to use." >&2
    exit 1
fi

need_root Julia

src=/etc/apt/sources.list.d/debian.sources
if [ ! -r "$src" ]; then
    echo "error: $src not found; cannot derive a bullseye source for Debian's julia package." >&2
    echo "Install Julia yourself (juliaup) or set JUTUL_JKERNEL_JULIA." >&2
    exit 1
fi

D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
mkdir -p "$D/lists/partial"
{
    cat "$src"
    echo
    # The first stanza again, with bullseye as its only suite.
    awk 'BEGIN{RS=""; ORS="\n\n"} NR==1{print; exit}' "$src" | sed -E 's/^Suites:.*/Suites: bullseye/'
} > "$D/all.sources"

A=(-o "Dir::Etc::sourcelist=$D/all.sources" -o Dir::Etc::sourceparts=/dev/null -o "Dir::State::Lists=$D/lists")
echo "Installing Debian bullseye's julia (1.5.3) and libunwind8 1.3.2 ..." >&2
$sudo apt-get "${A[@]}" -q update >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get "${A[@]}" -q install -y --no-install-recommends julia >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get "${A[@]}" -q install -y --allow-downgrades libunwind8=1.3.2-2 >&2
$sudo apt-mark hold libunwind8 >/dev/null  # a later upgrade would bring the crash back
julia --version
