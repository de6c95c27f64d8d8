#!/usr/bin/env bash
# Make sure a Julia the kernel can use is on this machine.
#
# Usage: ensure-julia.sh VENV   (the project's virtual environment; where the julia on PATH is
# Debian's or none, the Makefile puts VENV/julia-bin first on PATH, so the launcher written
# there is the `julia` every make target runs).
#
# A julia already on PATH (juliaup's, or the one julia-actions/setup-julia puts there in CI) is
# used as it is. Elsewhere we only explain what to do: installing Julia is the user's choice
# (juliaup). On Debian without one: Debian bookworm has no julia package, and bullseye's julia
# 1.5.3 (and its dependencies) install cleanly on it from a private apt sources file (the
# machine's own sources plus a copy of their first stanza with `Suites: bullseye`), which
# leaves the system's sources untouched.
#
# That Julia needs bullseye's libunwind 1.3.2: with bookworm's 1.6.2 it segfaults while
# collecting an InterruptException's backtrace (inside libunwind's dwarf_search_unwind_table).
# The system keeps its own libunwind8: bullseye's is unpacked into VENV/julia-libunwind, and
# VENV/julia-bin/julia starts Debian's julia with that folder first on LD_LIBRARY_PATH. Nothing is
# downgraded or held (a downgrade removes every package that needs the newer libunwind, such as
# libunwind-dev and GStreamer's -dev packages), and apt waits for a busy dpkg lock (debian.sh).
set -euo pipefail
. "$(dirname "$0")/debian.sh"

venv=$(cd "${1:?usage: ensure-julia.sh VENV}" && pwd)
launcher="$venv/julia-bin/julia"
unwind_dir="$venv/julia-libunwind"
debian_julia=/usr/bin/julia
unwind_version=1.3.2-2

# Whether $1 is Debian's own julia package (1.5.3, the one that needs the old libunwind).
is_debian_julia() {
    command -v dpkg-query >/dev/null 2>&1 && dpkg-query -W julia >/dev/null 2>&1 \
        && [ "$(readlink -f "$1")" = "$(readlink -f "$debian_julia")" ]
}

# Say so, once, where an earlier set-up of this project held the system's libunwind8 back.
note_old_hold() {
    if apt-mark showhold 2>/dev/null | grep -qx libunwind8 \
            && [ "$(dpkg-query -W -f='${Version}' libunwind8 2>/dev/null)" = "$unwind_version" ]; then
        echo "note: libunwind8 is held at $unwind_version, as make setup did before it kept its" >&2
        echo "own copy in $unwind_dir; nothing here needs the hold now ('apt-mark unhold" >&2
        echo "libunwind8' lets the system upgrade it)." >&2
    fi
}

# The private apt sources and lists for bullseye's packages; sets A (apt-get options) and D.
bullseye_sources() {
    local src=/etc/apt/sources.list.d/debian.sources
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
    A=(-o "Dir::Etc::sourcelist=$D/all.sources" -o Dir::Etc::sourceparts=/dev/null
       -o "Dir::State::Lists=$D/lists")
    apt_get "${A[@]}" -q update >&2
}

# Unpack bullseye's libunwind8 into $unwind_dir and write the launcher.
write_launcher() {
    [ -n "${A+set}" ] || bullseye_sources
    echo "Unpacking bullseye's libunwind8 $unwind_version into $unwind_dir for Julia 1.5.3 ..." >&2
    (cd "$D" && apt-get "${A[@]}" -q download "libunwind8=$unwind_version" >&2)
    rm -rf "$unwind_dir" "$D/deb"
    dpkg-deb -x "$D"/libunwind8_*.deb "$D/deb"
    mkdir -p "$unwind_dir" "$(dirname "$launcher")"
    cp -a "$D"/deb/usr/lib/*/libunwind*.so.8* "$unwind_dir/"
    cat > "$launcher" <<LAUNCHER
#!/bin/sh
# Debian's julia 1.5.3 with bullseye's libunwind $unwind_version, kept in this folder: with the
# system's newer libunwind it crashes on an interrupt (written by scripts/ensure-julia.sh).
LD_LIBRARY_PATH="$unwind_dir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec $debian_julia "\$@"
LAUNCHER
    chmod +x "$launcher"
}

julia_bin="${JUTUL_JKERNEL_JULIA:-julia}"
found=$(command -v "$julia_bin" || true)

if [ -n "$found" ] && [ "$found" = "$launcher" ] && [ -e "$unwind_dir/libunwind.so.8" ]; then
    exit 0
fi
if [ -n "$found" ] && [ "$found" != "$launcher" ] && ! is_debian_julia "$found"; then
    exit 0  # the user's Julia
fi

if [ -z "$found" ] || [ "$found" = "$launcher" ]; then
    if ! dpkg-query -W julia >/dev/null 2>&1; then
        if ! is_debian; then
            echo "error: '$julia_bin' was not found on PATH and this is not a Debian-family machine." >&2
            echo "Install Julia 1.6 or newer with juliaup (https://julialang.org/install/), or set" >&2
            echo "JUTUL_JKERNEL_JULIA to the julia executable you want the kernel to use." >&2
            exit 1
        fi
        need_root Julia
        bullseye_sources
        echo "Installing Debian bullseye's julia (1.5.3) ..." >&2
        apt_get "${A[@]}" -q install -y --no-install-recommends julia >&2
    fi
fi
need_root "bullseye's libunwind"  # apt-get download needs no root, but sets $sudo
write_launcher
note_old_hold
"$launcher" --version
