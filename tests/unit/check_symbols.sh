#!/bin/sh
# Every symbol the shared libsrv exports is public API: it starts with
# "srv_" and is not an internal "srv__" name. Usage: check_symbols.sh LIB.so
set -eu
lib=${1:?usage: check_symbols.sh path/to/libsrv.so}
[ -f "$lib" ] || { echo "check_symbols: no such file: $lib" >&2; exit 1; }

syms=$(nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | sort -u)
[ -n "$syms" ] || { echo "check_symbols: $lib exports nothing" >&2; exit 1; }

bad=$(printf '%s\n' "$syms" | grep -v '^srv_' || true)
internal=$(printf '%s\n' "$syms" | grep '^srv__' || true)
offenders=$(printf '%s\n%s\n' "$bad" "$internal" | sed '/^$/d')
if [ -n "$offenders" ]; then
    echo "check_symbols: $lib exports symbols outside the public srv_ API:" >&2
    printf '  %s\n' $offenders >&2
    exit 1
fi
# The API must be there at all (catches an empty or hidden-everything build).
for s in srv_server_new srv_respond srv_strerror srv_engine_default; do
    printf '%s\n' "$syms" | grep -qx "$s" || {
        echo "check_symbols: $lib does not export $s" >&2; exit 1; }
done
echo "check_symbols: $(printf '%s\n' "$syms" | wc -l) symbols, all srv_"
