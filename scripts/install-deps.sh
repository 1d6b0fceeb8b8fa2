#!/bin/sh
# Install what building, testing and benchmarking libsrv needs on Debian 12.
# (clang and libclang-rt-14-dev: libFuzzer for tests/fuzz, whose smoke run is
# part of the test suite; openssl: the TLS conformance run makes its
# certificates with the CLI; libgnutls28-dev: mhd's TLS, to come.)
# Idempotent: does nothing (and needs no network) when everything is there.
#   scripts/install-deps.sh           build, test and `make bench` (wrk included)
#   scripts/install-deps.sh --peers   also the reference servers that
#                                     `bench/compare --peers` runs: embedded
#                                     Tomcat 10.1 and Jetty 9.4 (Debian's jars,
#                                     compiled against with javac) and nginx with
#                                     the echo module. Never needed by make run
#                                     or make test.
set -eu

PACKAGES="build-essential meson ninja-build pkg-config curl
libevent-dev libmicrohttpd-dev libh2o-evloop-dev libssl-dev openssl libgnutls28-dev zlib1g-dev
libcmocka-dev libcurl4-openssl-dev
hey nghttp2-client gnuplot-nox valgrind wrk procps python3-prometheus-client
clang libclang-rt-14-dev"

# libjakarta-annotation-api-java: Tomcat fails at context start without it.
PEER_PACKAGES="openjdk-17-jdk-headless libtomcat10-embed-java libjakarta-annotation-api-java
libjetty9-java libservlet-api-java nginx libnginx-mod-http-echo"

case "${1:-}" in
    "") ;;
    --peers) PACKAGES="$PACKAGES $PEER_PACKAGES" ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps: unknown option '$1': give nothing or --peers" >&2; exit 2 ;;
esac

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
