#!/bin/sh
# Build the libFuzzer targets (tests/fuzz) with clang in build-fuzz and run
# each for FUZZ_SECONDS (default 60), one after the other:
#   make fuzz                       every target, 60 s each
#   make fuzz FUZZ_SECONDS=600      longer
#   FUZZ_TARGETS="head engine-mhd" scripts/fuzz.sh   (engine-* for each engine built)
#   FUZZ_CC=clang-19 scripts/fuzz.sh   (default: clang, else the newest clang-NN)
# Seeds come from tests/fuzz/corpus/<target>/ (engine-* targets share
# corpus/engine/); what a run discovers is kept in build-fuzz/fuzz-corpus/
# and reused by the next run. A crash leaves its input in
# build-fuzz/fuzz-artifacts/<target>/ and makes the script fail; minimize
# it with `build-fuzz/tests/fuzz/fuzz-<target> -minimize_crash=1 <input>`.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
seconds=${FUZZ_SECONDS:-60}
dir=${FUZZ_BUILD:-build-fuzz}

# The clang to build with: $FUZZ_CC if given, else `clang`, else the newest
# clang-NN on PATH (Debian 12's clang-14, 13's clang-19, as
# scripts/install-deps.sh installs them) - the first that links a libFuzzer
# target (its libclang-rt-NN-dev is there).
find_clang() {
    if [ -n "${FUZZ_CC:-}" ]; then echo "$FUZZ_CC"; return; fi
    cands="clang $(IFS=:; for d in $PATH; do ls "$d" 2>/dev/null; done \
        | grep -E '^clang-[0-9]+$' | sort -t- -k2,2nr -u)"
    probe=$(mktemp -d "${TMPDIR:-/tmp}/libsrv-fuzzcc.XXXXXX")
    echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
        >"$probe/t.c"
    for c in $cands; do
        if command -v "$c" >/dev/null 2>&1 \
            && "$c" -fsanitize=fuzzer "$probe/t.c" -o "$probe/t" >/dev/null 2>&1; then
            rm -rf "$probe"; echo "$c"; return
        fi
    done
    rm -rf "$probe"
    echo "fuzz: no clang with libFuzzer found (tried: $cands); run scripts/install-deps.sh" >&2
    exit 1
}

if [ ! -f "$dir/build.ninja" ]; then
    fuzz_cc=$(find_clang)
    echo "fuzz: configuring $dir with CC=$fuzz_cc"
    CC=$fuzz_cc meson setup "$dir" -Dfuzz=true -Dbuildtype=debugoptimized >"$dir.setup.log" 2>&1 \
        || { cat "$dir.setup.log"; exit 1; }
fi
ninja -C "$dir"

targets=${FUZZ_TARGETS:-$(cd "$dir/tests/fuzz" && find . -maxdepth 1 -type f -name "fuzz-*" | sed "s/^..fuzz-//" | sort)}
# Leak checks use the suite's suppressions (libh2o's per-thread caches).
export LSAN_OPTIONS=suppressions=$root/tests/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
failed=""
for t in $targets; do
    bin=$dir/tests/fuzz/fuzz-$t
    [ -x "$bin" ] || { echo "fuzz: no target $t in $dir"; exit 1; }
    case $t in engine-*) seeds=tests/fuzz/corpus/engine ;; *) seeds=tests/fuzz/corpus/$t ;; esac
    work=$dir/fuzz-corpus/$t
    art=$dir/fuzz-artifacts/$t
    mkdir -p "$work" "$art"
    log=$dir/fuzz-$t.log
    printf '\n==== fuzz %s for %ss (log: %s)\n' "$t" "$seconds" "$log"
    status=0
    # -timeout: an input that takes this long is a hang (the engine
    # targets' health probe gives up after 5 s).
    "$bin" -max_total_time="$seconds" -timeout=20 -print_final_stats=1 \
        -artifact_prefix="$art/" "$work" "$seeds" >"$log" 2>&1 || status=$?
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|#[0-9]+ +DONE' "$log" | tr '\n' ' '
    echo
    if [ "$status" != 0 ]; then
        echo "FAIL: fuzz-$t exited $status; its input is in $art/:"
        ls -l "$art"
        grep -E 'ERROR|SUMMARY|invariant|fuzz-engine' "$log" | head -20
        failed="$failed $t"
    fi
done
if [ -n "$failed" ]; then
    echo "fuzz: crashes in:$failed"
    exit 1
fi
echo "fuzz: every target ran ${seconds}s without a crash"
