#!/bin/sh
# The Debian 13 stage of `make test`: the unit and conformance suites of every
# engine Debian 13 (trixie) has, built and run inside a Debian 13 system made
# with debootstrap from the Debian archive this machine's apt uses.
#
# The system is kept in $SRV_DEBIAN13_ROOT (default /var/cache/libsrv-trixie,
# outside the tree) and reused: it is made once (about 30 s), and the
# project's own scripts/install-deps.sh brings it up to date inside (a no-op
# once everything is there). The tree's files (git ls-files: what is
# committed and what is edited or new, not build directories) are copied in
# afresh each run and built there with the default engine=auto.
#
# Needs root (debootstrap, chroot, mounts): run as root, or through sudo.
#   scripts/test-debian13.sh              unit + conformance suites
#   scripts/test-debian13.sh SUITE...     those meson test suites instead
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
sysroot=${SRV_DEBIAN13_ROOT:-/var/cache/libsrv-trixie}
suites=${*:-unit conformance}

SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
        echo "test-debian13: needs root (debootstrap, chroot, mounts), or sudo" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive

# The archive this machine's apt uses for Debian itself (deb822 or one-line
# sources; not -security, not third-party lists); debootstrap's own default
# when none is found.
mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
         sed -n 's|^URIs:[[:space:]]*\([^[:space:]]*/debian\)/*[[:space:]]*$|\1|p' | head -1)
[ -n "$mirror" ] || mirror=$(sed -n 's|^deb[[:space:]]\{1,\}\([^[:space:]]*/debian\)/*[[:space:]].*|\1|p' \
                              /etc/apt/sources.list 2>/dev/null | head -1)

# One run at a time uses the system (its mounts, its apt).
if [ -z "${SRV_DEBIAN13_LOCKED:-}" ] && command -v flock >/dev/null 2>&1; then
    $SUDO mkdir -p "$(dirname "$sysroot")"
    exec env SRV_DEBIAN13_LOCKED=1 flock "$sysroot.lock" sh "$top/scripts/test-debian13.sh" "$@"
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends debootstrap
fi

if ! grep -q '^13' "$sysroot/etc/debian_version" 2>/dev/null || [ ! -x "$sysroot/usr/bin/apt-get" ]; then
    echo "test-debian13: making a Debian 13 system in $sysroot${mirror:+ from $mirror}"
    $SUDO rm -rf "$sysroot"
    $SUDO mkdir -p "$(dirname "$sysroot")"
    # shellcheck disable=SC2086
    $SUDO debootstrap --variant=minbase trixie "$sysroot" $mirror >"$top/build-debian13.bootstrap.log" 2>&1 \
        || { tail -20 "$top/build-debian13.bootstrap.log"; $SUDO rm -rf "$sysroot"; exit 1; }
fi

cleanup() {
    for m in dev/shm dev/pts dev proc; do
        if mountpoint -q "$sysroot/$m" 2>/dev/null; then $SUDO umount -l "$sysroot/$m" || true; fi
    done
}
trap cleanup EXIT INT TERM
mountpoint -q "$sysroot/proc" || $SUDO mount -t proc proc "$sysroot/proc"
mountpoint -q "$sysroot/dev" || $SUDO mount --bind /dev "$sysroot/dev"
mountpoint -q "$sysroot/dev/pts" || $SUDO mount --bind /dev/pts "$sysroot/dev/pts"
mountpoint -q "$sysroot/dev/shm" || $SUDO mount -t tmpfs shm "$sysroot/dev/shm"
$SUDO cp /etc/resolv.conf "$sysroot/etc/resolv.conf" 2>/dev/null || true

# The tree as it is now, without build output.
$SUDO rm -rf "$sysroot/root/libsrv"
$SUDO mkdir -p "$sysroot/root/libsrv"
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$top" ls-files -z --cached --others --exclude-standard |
        (cd "$top" && xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) |
        tar -C "$top" --null -T - -cf - | $SUDO tar -C "$sysroot/root/libsrv" -xf -
else
    tar -C "$top" --exclude='./build*' --exclude='./bench/results' -cf - . |
        $SUDO tar -C "$sysroot/root/libsrv" -xf -
fi

# Inside: what a new user runs (install-deps needs make's absence to be
# covered too), then the suites. Sanitizer settings as on the host.
$SUDO chroot "$sysroot" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 /bin/sh -eu -c '
    cd /root/libsrv
    grep -q "^13" /etc/debian_version
    ./scripts/install-deps.sh --no-browser   # the browser suite is not run here
    meson setup build >build.setup.log 2>&1 || { cat build.setup.log; exit 1; }
    ninja -C build >/dev/null
    echo "Debian $(cat /etc/debian_version): engines $(cat build/srv_engines.txt)"
    set --
    for s in '"$suites"'; do set -- "$@" --suite "$s"; done
    meson test -C build --print-errorlogs "$@"
'
