#!/bin/sh
# Install what building, testing and benchmarking libsrv needs, by the names
# the running Debian release has (/etc/os-release):
#   Debian 12 (bookworm): clang-14 + libclang-rt-14-dev, libh2o-evloop-dev
#                         (the h2o engine), OpenJDK 17 and the standalone
#                         h2o server for the peers
#   Debian 13 (trixie):   clang-19 + libclang-rt-19-dev, no libh2o and no
#                         h2o server (h2o left Debian with 13: meson's
#                         engine=auto skips h2o, bench/compare its reference
#                         row), OpenJDK 21 for the peers
#   another release:      Debian 13's names are tried (and it says so)
# A package the release has no candidate for is skipped with a message,
# never asked of apt. (libuv1-dev: the uv engine; libnghttp2-dev: the core's
# HTTP/2; libwslay-dev: the core's WebSocket framing (1.1.1 on both
# releases); clang and libclang-rt: libFuzzer for tests/fuzz,
# whose smoke run is part of the test suite; openssl: the TLS conformance
# run makes its certificates with the CLI; libgnutls28-dev: mhd's TLS;
# libjansson-dev: examples/todo; chromium, and nodejs + npm unless a node
# and an npm are already on PATH: the browser test, whose puppeteer-core
# it then installs with `npm ci` in tests/browser, from the lockfile.)
# Idempotent: does nothing (and needs no network) when everything is there,
# tests/browser/node_modules included.
#   scripts/install-deps.sh           build, test and `make bench` (wrk included)
#   scripts/install-deps.sh --peers   also the reference servers that
#                                     `bench/compare --peers` runs: embedded
#                                     Tomcat 10.1 and Jetty 9.4 (Debian's jars,
#                                     compiled against with javac), nginx with
#                                     the echo module and (Debian 12) the
#                                     standalone h2o, hello's reference row for
#                                     the h2o engine. Never needed by make run
#                                     or make test.
#   scripts/install-deps.sh --no-browser   without the browser test's chromium,
#                                     node and npm packages (the Debian 13
#                                     stage of make test, which does not run it)
set -eu

peers=0
browser=1
for arg in "$@"; do
    case $arg in
        --peers) peers=1 ;;
        --no-browser) browser=0 ;;
        -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install-deps: unknown option '$arg': give --peers, --no-browser or nothing" >&2
           exit 2 ;;
    esac
done

# The release: ID, VERSION_ID and VERSION_CODENAME of os-release.
osr=/etc/os-release
[ -r "$osr" ] || osr=/usr/lib/os-release
osval() { [ -r "$osr" ] && sed -n "s/^$1=\"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p" "$osr" | head -1; }
os_id=$(osval ID); os_version=$(osval VERSION_ID); os_codename=$(osval VERSION_CODENAME)
case "$os_id:$os_version:$os_codename" in
    debian:12:*|*:*:bookworm) release=12 ;;
    debian:13:*|*:*:trixie) release=13 ;;
    *) release=unknown ;;
esac

# Debian 12 and 13 differ in: clang's version (the libFuzzer runtime is
# per version), libh2o and the h2o server (12 only), the JDK (17 on 12; 21
# on 13, which has no 17). Jetty: bench/compare compiles against jetty9's
# jars, which 13 still has beside jetty12.
case $release in
    12) clang_v=14; jdk=openjdk-17-jdk-headless; h2o=libh2o-evloop-dev; h2o_server=h2o ;;
    13) clang_v=19; jdk=openjdk-21-jdk-headless; h2o=""; h2o_server="" ;;
    *)  echo "install-deps: ${os_id:-unknown} ${os_version:-?} (${os_codename:-?}, $osr)" \
             "is not Debian 12 or 13: trying Debian 13's package names" >&2
        clang_v=19; jdk=openjdk-21-jdk-headless; h2o=""; h2o_server="" ;;
esac

PACKAGES="build-essential meson ninja-build pkg-config curl
libevent-dev libmicrohttpd-dev $h2o libuv1-dev libnghttp2-dev libwslay-dev libssl-dev openssl libgnutls28-dev zlib1g-dev
libcmocka-dev libcurl4-openssl-dev
hey nghttp2-client gnuplot-nox valgrind wrk procps python3-prometheus-client
clang-$clang_v libclang-rt-$clang_v-dev libjansson-dev"
# The browser test's: chromium, and Debian's node and npm unless another
# node is installed (NodeSource's nodejs bundles npm and conflicts with
# Debian's npm package).
if [ "$browser" = 1 ]; then
    PACKAGES="$PACKAGES chromium"
    command -v node >/dev/null 2>&1 || PACKAGES="$PACKAGES nodejs"
    command -v npm >/dev/null 2>&1 || PACKAGES="$PACKAGES npm"
fi

# libjakarta-annotation-api-java: Tomcat fails at context start without it.
# nginx and h2o are peers, not build tools: each package starts its system
# service on port 80 where services start (not in a container whose
# policy-rc.d forbids it); the bench runs its own instances.
PEER_PACKAGES="$jdk libtomcat10-embed-java libjakarta-annotation-api-java
libjetty9-java libservlet-api-java nginx libnginx-mod-http-echo $h2o_server"

[ "$peers" = 1 ] && PACKAGES="$PACKAGES $PEER_PACKAGES"

# tests/browser's puppeteer-core, pinned by its package-lock.json: `npm ci`
# when node_modules was not installed from this very lockfile (a copy of
# it beside node_modules says which one was). No browser is downloaded:
# puppeteer-core drives Debian's chromium.
npm_ci() {
    [ "$browser" = 1 ] || return 0
    dir=$(cd "$(dirname "$0")/.." && pwd)/tests/browser
    cmp -s "$dir/package-lock.json" "$dir/node_modules/.libsrv-lock.json" 2>/dev/null && return 0
    command -v npm >/dev/null 2>&1 || { echo "install-deps: no npm: cannot install $dir's packages" >&2; return 1; }
    echo "install-deps: npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) \
        && cp "$dir/package-lock.json" "$dir/node_modules/.libsrv-lock.json"
}

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing="$missing $p"
done
if [ -z "$missing" ]; then
    npm_ci
    exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
        echo "install-deps: need root (or sudo) to install:$missing" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Only what this release can install: a package without a candidate would
# make apt refuse the whole list.
install=""
for p in $missing; do
    cand=$(apt-cache policy "$p" 2>/dev/null | sed -n 's/^ *Candidate: *//p')
    if [ -n "$cand" ] && [ "$cand" != "(none)" ]; then
        install="$install $p"
    else
        echo "install-deps: skipping $p: not packaged for this release" >&2
    fi
done
if [ -n "$install" ]; then
    echo "install-deps: installing:$install"
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $install
fi
npm_ci
