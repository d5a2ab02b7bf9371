#!/usr/bin/env bash
# Runs the Swift examples of the documentation as a reader would: each one is the main.swift of an executable
# that depends on PortLoop by path, built with `swift build` and run with `swift run`'s binary.
#
#   Tests/Examples/run-examples.sh              build and run every example (make examples)
#   Tests/Examples/run-examples.sh NAME...      only the named examples
#   Tests/Examples/run-examples.sh --list       list the examples and where they are
#
# Where examples live: README.md and every article of Sources/PortLoop/PortLoop.docc/*.md.
#
# The convention. Every ```swift block in those files must be marked by an HTML comment on the line before it
# (blank lines between are allowed); a block without a marker fails the run, so no example goes untested:
#
#   <!-- example: NAME -->              a complete main.swift: built, run, and its standard output checked
#   <!-- example: NAME build-only -->   a complete main.swift that is built but not run (it waits for a
#                                       signal, say); the text around it says why
#   <!-- not-an-example -->             not Swift that runs: a Package.swift excerpt, an API outline
#
# NAME is letters, digits and '-', unique across all files; it becomes the executable target's name.
# An example's expected output is the ```text block that follows its swift block, marked `<!-- output -->`
# on the line before it (blank lines allowed between the swift block, the marker and the text block).
# Without an output block the example must print nothing. Matching, line by line:
#   - a line must equal the expected line exactly, except that `…` in an expected line matches any text
#     (also none) within the line: `created port#…` matches `created port#12`;
#   - an expected line that is only `…` matches any number of lines (also none).
# An example passes when it exits with status 0 within the time limit (EXAMPLE_TIMEOUT, 20 s) and its
# standard output matches; what it writes to standard error is shown when it fails.
#
# How: every example becomes Sources/NAME/main.swift of one generated package in .build-examples/package,
# whose manifest is the one README.md's quick start shows (tools 6.0, Swift 6 language mode, PortLoop by
# path); it is built once (scratch path .build-examples/scratch), then each example runs in turn. The last
# line is `examples: N passed, M failed`; the exit status is non-zero when anything failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SWIFT="${SWIFT:-swift}"
TIMEOUT="${EXAMPLE_TIMEOUT:-20}"
WORK="$ROOT/.build-examples"
PACKAGE="$WORK/package"
SCRATCH="$WORK/scratch"
EXTRACTED="$WORK/extracted"

cd "$ROOT"
sources=(README.md)
for article in Sources/PortLoop/PortLoop.docc/*.md; do
    [ -e "$article" ] && sources+=("$article")
done

# ---- Extraction -------------------------------------------------------------------------------------
# Writes EXTRACTED/NAME.swift, EXTRACTED/NAME.out (expected output, if any), EXTRACTED/NAME.kind (run or
# build-only) and EXTRACTED/index (NAME<TAB>file:line). Problems go to EXTRACTED/problems.
rm -rf "$EXTRACTED"
mkdir -p "$EXTRACTED"
: > "$EXTRACTED/index"
: > "$EXTRACTED/problems"
for file in "${sources[@]}"; do
    awk -v file="$file" -v dir="$EXTRACTED" '
        function problem(message) { print file ":" FNR ": " message >> (dir "/problems") }
        function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
        BEGIN { state = "text"; marker = ""; name = ""; pending_output = "" }
        {
            line = $0
            if (state == "swift") {
                if (line ~ /^```[ \t]*$/) {
                    state = "text"
                    if (name != "") { close(dir "/" name ".swift"); pending_output = name } else { pending_output = "" }
                    marker = ""
                } else if (name != "") {
                    print line > (dir "/" name ".swift")
                }
                next
            }
            if (state == "output") {
                if (line ~ /^```[ \t]*$/) { state = "text"; close(dir "/" name ".out"); pending_output = ""; marker = "" }
                else print line > (dir "/" name ".out")
                next
            }
            if (state == "othercode") {
                if (line ~ /^```[ \t]*$/) state = "text"
                next
            }
            # state == "text"
            if (line ~ /^```swift[ \t]*$/) {
                state = "swift"
                name = ""
                if (marker ~ /^example:/) {
                    spec = trim(substr(marker, 9))
                    split(spec, parts, /[ \t]+/)
                    name = parts[1]; kind = (parts[2] == "build-only") ? "build-only" : "run"
                    if (parts[2] != "" && parts[2] != "build-only") problem("unknown example option \"" parts[2] "\"")
                    if (name !~ /^[A-Za-z][A-Za-z0-9-]*$/) { problem("bad example name \"" name "\""); name = "" }
                    else {
                        printf "" > (dir "/" name ".swift")
                        print kind > (dir "/" name ".kind"); close(dir "/" name ".kind")
                        print name "\t" file ":" FNR >> (dir "/index")
                    }
                } else if (marker != "not-an-example") {
                    problem("a ```swift block without an <!-- example: NAME --> or <!-- not-an-example --> marker")
                }
                marker = ""
                next
            }
            if (line ~ /^```text[ \t]*$/ && marker == "output") {
                if (pending_output == "") problem("an <!-- output --> block that follows no example")
                else { name = pending_output; state = "output"; printf "" > (dir "/" name ".out") }
                next
            }
            if (line ~ /^```/) { state = "othercode"; marker = ""; pending_output = ""; next }
            if (line ~ /^[ \t]*<!--.*-->[ \t]*$/) {
                m = line; sub(/^[ \t]*<!--[ \t]*/, "", m); sub(/[ \t]*-->[ \t]*$/, "", m)
                if (m ~ /^example:/ || m == "not-an-example" || m == "output") { marker = m; next }
            }
            if (trim(line) != "") { marker = ""; pending_output = "" }
        }
        END { if (state != "text") problem("a code block that never closes") }
    ' "$file"
done

if [ "${1:-}" = "--list" ]; then
    while IFS=$'\t' read -r name where; do
        printf '%-28s %-10s %s\n' "$name" "$(cat "$EXTRACTED/$name.kind")" "$where"
    done < "$EXTRACTED/index"
    exit 0
fi

if [ -s "$EXTRACTED/problems" ]; then
    cat "$EXTRACTED/problems" >&2
    echo "examples: the documentation breaks the conventions at the top of $0" >&2
    exit 1
fi
duplicates="$(cut -f1 "$EXTRACTED/index" | sort | uniq -d)"
if [ -n "$duplicates" ]; then
    echo "examples: names used twice: $duplicates" >&2
    exit 1
fi

names=()
if [ "$#" -gt 0 ]; then
    for wanted in "$@"; do
        if ! cut -f1 "$EXTRACTED/index" | grep -qx -- "$wanted"; then
            echo "examples: no example named $wanted (see --list)" >&2
            exit 1
        fi
        names+=("$wanted")
    done
else
    while IFS=$'\t' read -r name _; do names+=("$name"); done < "$EXTRACTED/index"
fi
if [ "${#names[@]}" -eq 0 ]; then
    echo "examples: none found" >&2
    exit 1
fi

# ---- The package ------------------------------------------------------------------------------------
# PortLoop is reached through a link named PortLoop, so that the manifest reads as the quick start's does
# (a path dependency's package name is the last component of its path).
mkdir -p "$PACKAGE"
ln -sfn "$ROOT" "$WORK/PortLoop"
rm -rf "$PACKAGE/Sources"
mkdir -p "$PACKAGE/Sources"
{
    echo '// swift-tools-version:6.0'
    echo '// Generated by Tests/Examples/run-examples.sh: one executable per documentation example.'
    echo 'import PackageDescription'
    echo ''
    echo 'let package = Package('
    echo '    name: "PortLoopExamples",'
    echo '    dependencies: ['
    echo '        .package(path: "../PortLoop"),'
    echo '    ],'
    echo '    targets: ['
    for name in "${names[@]}"; do
        echo "        .executableTarget(name: \"$name\", dependencies: [.product(name: \"PortLoop\", package: \"PortLoop\")]),"
    done
    echo '    ]'
    echo ')'
} > "$PACKAGE/Package.swift"
for name in "${names[@]}"; do
    mkdir -p "$PACKAGE/Sources/$name"
    cp "$EXTRACTED/$name.swift" "$PACKAGE/Sources/$name/main.swift"
done

echo "examples: building ${#names[@]} examples (package $PACKAGE)"
build_log="$WORK/build.log"
if ! "$SWIFT" build --package-path "$PACKAGE" --scratch-path "$SCRATCH" > "$build_log" 2>&1; then
    cat "$build_log"
    failed=0
    for name in "${names[@]}"; do
        if grep -q "Sources/$name/main.swift:[0-9]*:[0-9]*: error" "$build_log"; then
            where="$(grep -P "^$name\t" "$EXTRACTED/index" | cut -f2)"
            echo "FAIL $name ($where): does not compile"
            failed=$((failed + 1))
        fi
    done
    [ "$failed" -gt 0 ] || failed="${#names[@]}"
    echo "examples: 0 passed, $failed failed"
    exit 1
fi
bin="$("$SWIFT" build --package-path "$PACKAGE" --scratch-path "$SCRATCH" --show-bin-path)"

# ---- Running ----------------------------------------------------------------------------------------
# matches EXPECTED ACTUAL: the rules at the top of this file.
matches() {
    awk -v expected_file="$1" '
        function glob(pattern, text,    pieces, n, i, at, pos) {
            n = split(pattern, pieces, "…")
            if (n == 1) return pattern == text
            if (substr(text, 1, length(pieces[1])) != pieces[1]) return 0
            pos = length(pieces[1]) + 1
            for (i = 2; i < n; i++) {
                at = index(substr(text, pos), pieces[i])
                if (at == 0) return 0
                pos += at - 1 + length(pieces[i])
            }
            return length(text) - pos + 1 >= length(pieces[n]) && \
                   substr(text, length(text) - length(pieces[n]) + 1) == pieces[n]
        }
        # Whether expected lines e.. match actual lines a.. (backtracking over whole-line wildcards).
        function match_from(e, a,    k) {
            if (e > ne) return a > na
            if (want[e] == "…") {
                for (k = a; k <= na + 1; k++) if (match_from(e + 1, k)) return 1
                return 0
            }
            if (a > na) return 0
            if (!glob(want[e], got[a])) return 0
            return match_from(e + 1, a + 1)
        }
        BEGIN { ne = 0; while ((getline line < expected_file) > 0) want[++ne] = line }
        { got[++na] = $0 }
        END { exit match_from(1, 1) ? 0 : 1 }
    ' "$2"
}

passed=0
failed=0
for name in "${names[@]}"; do
    where="$(grep -P "^$name\t" "$EXTRACTED/index" | cut -f2)"
    kind="$(cat "$EXTRACTED/$name.kind")"
    if [ "$kind" = "build-only" ]; then
        echo "ok   $name (built, not run: $where)"
        passed=$((passed + 1))
        continue
    fi
    expected="$EXTRACTED/$name.out"
    [ -e "$expected" ] || : > "$expected"
    out="$WORK/$name.stdout"
    err="$WORK/$name.stderr"
    status=0
    start=$(date +%s%N)
    timeout --kill-after=5 "$TIMEOUT" "$bin/$name" > "$out" 2> "$err" < /dev/null || status=$?
    took=$(( ($(date +%s%N) - start) / 1000000 ))
    problem=""
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        problem="did not finish within ${TIMEOUT} s"
    elif [ "$status" -ne 0 ]; then
        problem="exited with status $status"
    elif ! matches "$expected" "$out"; then
        problem="printed something else than its expected output"
    fi
    if [ -z "$problem" ]; then
        echo "ok   $name (${took} ms)"
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL $name ($where): $problem"
        echo "---- expected ($expected)"; cat "$expected"
        echo "---- standard output"; cat "$out"
        if [ -s "$err" ]; then echo "---- standard error"; cat "$err"; fi
        echo "----"
    fi
done
echo "examples: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
