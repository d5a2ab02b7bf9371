#!/usr/bin/env bash
# helgrind-verdict.sh LOG... — fails when helgrind reported a thread error that counts in the stress program's logs
# (one per process: the scenarios fork), or when it is given no log or a log that does not exist. Races are
# suppressed (helgrind.supp says why). Every other report names its thread first ("Thread #3: lock order ...
# violated", "Thread #3 unlocked a not-locked lock", "Thread #3's call to ... failed"); apart from the announcements
# ("Thread #3 was created", "... is the program's root thread"), each counts, except two kinds:
#   - "pthread_cond_{signal,broadcast}: ... associated lock is not held": the port layer signals a condition
#     variable after letting go of its lock, on purpose (the woken thread does not block on it at once);
#   - "Exiting thread still holds N lock(s)": in a child of fork(), helgrind has the parent's other threads exit
#     holding what they held at the fork (every one seen was a thread caught in a system call: accept4, a futex
#     wake); the library's fork handlers make the child forget those locks. The exemption is by kind, so it would
#     also pass a thread that really ended holding a lock; none of the layer's threads ends before its process.
# Everything else — above all "lock order ... violated" (a potential deadlock) and "Attempt to re-lock" — fails,
# printed with its stack.
set -eu
if [ "$#" -eq 0 ]; then
    echo "helgrind-verdict: no log to read" >&2
    exit 1
fi
report='^==[0-9]+== Thread #[0-9]+'
announcement='^==[0-9]+== Thread #[0-9]+ (was created|is the program.s root thread)'
ignored='pthread_cond_\{signal,broadcast\}: (dubious: )?associated lock is not held|Exiting thread still holds [0-9]+ locks?'
failed=0
for log in "$@"; do
    if [ ! -f "$log" ]; then
        echo "helgrind-verdict: no log $log" >&2
        exit 1
    fi
    if grep -E "$report" "$log" | grep -v -E "$announcement" | grep -v -E "$ignored" >/dev/null; then
        failed=1
        echo "helgrind: thread errors in $log:" >&2
        awk -v report="$report" -v announcement="$announcement" -v ignored="$ignored" '
            $0 ~ report { show = ($0 !~ announcement && $0 !~ ignored) }
            /^==[0-9]+== -+$/ { show = 0 }
            show { print }' "$log" >&2
    fi
done
if [ "$failed" -ne 0 ]; then exit 1; fi
echo "helgrind: no lock-order inversion or lock misuse in $# process logs"
