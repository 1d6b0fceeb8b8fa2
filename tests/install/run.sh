#!/bin/sh
# Install libsrv into a temporary prefix, then build tests/install/app.c out
# of tree against it with pkg-config - once with the shared library, once
# with libsrv.a and the Libs.private flags - and run both (loopback only).
# Usage: sh tests/install/run.sh ROOT   (ROOT: the libsrv source tree)
set -eu
root=$(cd "${1:?usage: run.sh ROOT}" && pwd)
here=$root/tests/install
tmp=$(mktemp -d "${TMPDIR:-/tmp}/libsrv-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
build=$tmp/build
prefix=$tmp/prefix

say() { printf 'install-test: %s\n' "$*"; }
die() { printf 'install-test: FAIL: %s\n' "$*" >&2; exit 1; }
logged() { # log-name, command...: run quietly, show the log on failure
    log=$tmp/$1.log; shift
    "$@" >"$log" 2>&1 || { cat "$log" >&2; die "$* failed"; }
}

say "building and installing into $prefix"
logged setup meson setup "$build" "$root" -Dtests=false -Dbuildtype=release \
    --prefix="$prefix" --libdir=lib
logged build ninja -C "$build"
logged install meson install -C "$build" --no-rebuild

for f in include/srv.h lib/libsrv.so lib/libsrv.a lib/pkgconfig/libsrv.pc; do
    [ -e "$prefix/$f" ] || die "meson install did not install $f"
done
# Only the public header is installed.
[ ! -e "$prefix/include/srv_engine.h" ] || die "srv_engine.h was installed"

PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export PKG_CONFIG_PATH
pkg-config --exists libsrv || die "pkg-config cannot find libsrv in $PKG_CONFIG_PATH"
cflags=$(pkg-config --cflags libsrv)
libs=$(pkg-config --libs libsrv)
say "pkg-config --cflags --libs libsrv: $cflags $libs"

# 1. Shared: what the README tells users to type.
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror -pedantic "$here/app.c" $cflags $libs -o "$tmp/app-shared" \
    || die "app.c does not build against the installed shared libsrv"
LD_LIBRARY_PATH=$prefix/lib ldd "$tmp/app-shared" | grep -q "$prefix/lib/libsrv.so" \
    || die "app-shared does not load the installed libsrv.so"
LD_LIBRARY_PATH=$prefix/lib timeout 30 "$tmp/app-shared" || die "app-shared failed"

# 2. Static libsrv: libsrv.a in place of -lsrv, plus the Libs.private and
# Requires.private flags pkg-config --static gives (system libraries stay
# shared: a fully static glibc program is not worth supporting).
static_libs=$(pkg-config --static --libs libsrv)
case " $static_libs " in
    *" -lsrv "*) ;;
    *) die "pkg-config --static --libs libsrv has no -lsrv: $static_libs" ;;
esac
static_libs=$(printf ' %s ' "$static_libs" | sed "s# -lsrv # $prefix/lib/libsrv.a #")
say "static link: $static_libs"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror "$here/app.c" $cflags $static_libs -static-libgcc \
    -o "$tmp/app-static" \
    || die "app.c does not link against libsrv.a with pkg-config --static flags (Libs.private incomplete?)"
if ldd "$tmp/app-static" | grep -q libsrv; then
    die "app-static still loads a shared libsrv"
fi
timeout 30 "$tmp/app-static" || die "app-static failed"

say "ok: shared and static builds of an out-of-tree app answer a request"
