# Sourced by the ensure-*.sh scripts: what installing a Debian package needs, said once.

# True on a Debian-family machine where apt-get can install what is missing.
is_debian() {
    [ -r /etc/os-release ] && grep -qiE '^(ID|ID_LIKE)=.*debian' /etc/os-release \
        && command -v apt-get >/dev/null 2>&1
}

# Set $sudo to "" as root, else to "sudo"; exit explaining that installing $1 needs root.
need_root() {
    sudo=""
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null 2>&1 || { echo "error: installing $1 needs root (or sudo)." >&2; exit 1; }
        sudo="sudo"
    fi
}

# Seconds apt waits for another apt or dpkg to let go of its locks before it gives up (an
# unattended upgrade, or a second `make setup` beside this one); apt's own default is to fail
# at once with "Could not get lock /var/lib/dpkg/lock-frontend".
APT_LOCK_WAIT=${JUTUL_JKERNEL_APT_LOCK_WAIT:-600}

# apt-get as root, non-interactive, waiting (bounded) for the dpkg and the lists locks.
apt_get() {
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_WAIT" "$@"
}
