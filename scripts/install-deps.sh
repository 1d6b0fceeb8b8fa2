#!/bin/sh
# Install what building, testing and benchmarking libsrv needs on Debian 12.
# (clang and libclang-rt-14-dev: libFuzzer for tests/fuzz, whose smoke run is
# part of the test suite.)
# Idempotent: does nothing (and needs no network) when everything is there.
set -eu

PACKAGES="build-essential meson ninja-build pkg-config curl
libevent-dev libhttp-parser-dev libmicrohttpd-dev libh2o-evloop-dev libssl-dev
libcmocka-dev libcurl4-openssl-dev
hey nghttp2-client gnuplot-nox valgrind
clang libclang-rt-14-dev"

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "install-deps: installing:$missing"
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
        echo "install-deps: need root (or sudo) to install:$missing" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
