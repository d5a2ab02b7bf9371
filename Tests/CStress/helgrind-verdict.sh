#!/usr/bin/env bash
# helgrind-verdict.sh LOG... — fails when helgrind reported a thread error that counts in the stress program's logs
# (one per process: the scenarios fork). Races are suppressed (helgrind.supp says why); of the rest, three kinds of
# report are not errors here and are left out:
#   - "pthread_cond_{signal,broadcast}: ... associated lock is not held": the port layer signals a condition
#     variable after letting go of its lock, on purpose (the woken thread does not block on it at once);
#   - "Exiting thread still holds N lock(s)": in a child of fork(), helgrind has the parent's other threads exit
#     holding what they held at the fork; the library's fork handlers make the child forget those locks.
# Everything else — above all "lock order ... violated" (a potential deadlock) and "Attempt to re-lock" — fails,
# printed with its stack.
set -eu
ignored='pthread_cond_\{signal,broadcast\}: (dubious: )?associated lock is not held|Exiting thread still holds [0-9]+ locks?'
failed=0
for log in "$@"; do
    [ -s "$log" ] || continue
    # An error report starts with "Thread #N: " (announcements say "Thread #N was created").
    if grep -E '^==[0-9]+== Thread #[0-9]+: ' "$log" | grep -v -E "$ignored" >/dev/null; then
        failed=1
        echo "helgrind: thread errors in $log:" >&2
        awk -v ignored="$ignored" '
            /^==[0-9]+== Thread #[0-9]+: / { show = ($0 !~ ignored) }
            /^==[0-9]+== -+$/ { show = 0 }
            show { print }' "$log" >&2
    fi
done
if [ "$failed" -ne 0 ]; then exit 1; fi
echo "helgrind: no lock-order inversion or lock misuse in $# process logs"
