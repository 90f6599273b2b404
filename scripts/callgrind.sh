#!/usr/bin/env bash
# Runs an executable under valgrind's callgrind, the way this machine's valgrind (Debian
# bookworm's 3.19) can run Swift 6.3's executables:
# - on a copy without its DWARF debug information: 3.19 gives up on DWARF 5 ("unhandled dwarf2
#   abbrev form"); the symbol table stays, so profiles still name every function;
# - with sigsuspend given a writable copy of its mask: 3.19 writes the mask back into the
#   caller's argument, and libdispatch's signal thread passes a constant in read-only memory
#   (valgrind then dies of a SIGSEGV of its own).
# The copy and the shim are made once per build of EXECUTABLE, under $TMPDIR.
# Counts are read while it runs: `callgrind_control --zero PID`, `callgrind_control --dump PID`
# (each dump is OUT.N); the pid is the executable's own (this script execs valgrind).
#
# usage: scripts/callgrind.sh OUT EXECUTABLE [ARGS...]   OUT: callgrind's output file
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
out=$1 executable=$2; shift 2
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
work=${TMPDIR:-/tmp}/callgrind-tools
mkdir -p "$work"
shim=$work/sigsuspend-copy.so
if [ ! -e "$shim" ]; then
  cat > "$work/sigsuspend-copy.c" <<'C'
#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    return (int)syscall(SYS_rt_sigsuspend, &copy, _NSIG / 8);
}
C
  cc -shared -fPIC -O2 -o "$shim.tmp" "$work/sigsuspend-copy.c" && mv "$shim.tmp" "$shim"
fi
stamp=$(stat -c '%s-%Y-%i' "$executable")
stripped=$work/$(basename "$executable")-$(printf '%s' "$(readlink -f "$executable")" | md5sum | cut -c1-8)-$stamp
if [ ! -e "$stripped" ]; then
  objcopy --strip-debug "$executable" "$stripped.tmp" && mv "$stripped.tmp" "$stripped"
fi
export LD_PRELOAD=$shim${LD_PRELOAD:+:$LD_PRELOAD}
exec valgrind --tool=callgrind --callgrind-out-file="$out" "$stripped" "$@"
