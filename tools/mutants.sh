#!/usr/bin/env bash
# Mutation testing of the files whose meaning the suite must pin down (docs/testing.md,
# "Mutation testing"). Not part of CI: each mutant is a rebuild. Needs `cargo install cargo-mutants`.
#
#   tools/mutants.sh                 every group, results in target/mutants/<group>/
#   tools/mutants.sh convert         one group (convert, network, forward, limits)
#   tools/mutants.sh convert --iterate   only what was not caught last time
#
# Each group builds and runs only the test binaries that can see its files' behaviour (the
# `-C` arguments reach both the build and the test run, so nothing else is linked). The
# containerd and real-client suites are left out for time; they run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A FILES TESTS
FILES[convert]="src/convert/scan.rs src/convert/policy.rs src/convert/mod.rs src/convert/exceptions/*.rs"
TESTS[convert]="scan exceptions fail_closed classification defaults roundtrip exhaustive matrix revision transparency meaning config"
FILES[network]="src/grpc.rs src/frontend.rs src/backend.rs"
TESTS[network]="transparency discovery wiring front_door socket config fail_closed matrix cli"
FILES[forward]="src/forward/mod.rs src/forward/call.rs src/relay/answer.rs src/relay/message.rs src/relay/serve.rs src/relay/upstream.rs src/revision.rs src/convert/cx.rs src/convert/loss.rs src/convert/classes.rs"
TESTS[forward]="relay scan exceptions fail_closed classification defaults revision transparency config roundtrip exhaustive matrix discovery wiring meaning"
FILES[limits]="src/relay/admission.rs src/relay/serve.rs"
TESTS[limits]="limits relay front_door restart"
# Tests left out of a group's runs: the real clients are not in cargo-mutants' copy of the tree.
declare -A SKIP
SKIP[limits]="real_clients"

# Per file: caught / missed / unviable / timeout, as docs/testing.md's table shows them. After an
# --iterate run, the last column counts what earlier runs caught or found unviable (not re-run).
summarise() {
    local out=$1
    for outcome in caught missed unviable timeout previously_caught; do
        [[ -f "$out/$outcome.txt" ]] && sed "s/:.*/ $outcome/" "$out/$outcome.txt"
    done | awk '{ n[$1 " " $2]++; files[$1] = 1 }
        END { for (f in files) printf "| %s | %d | %d | %d | %d | %d |\n", f, n[f " caught"], n[f " missed"],
              n[f " unviable"], n[f " timeout"], n[f " previously_caught"] }' | sort
}

groups=(convert network forward limits)
if [[ $# -gt 0 && -n "${FILES[$1]:-}" ]]; then
    groups=("$1")
    shift
fi

for group in "${groups[@]}"; do
    args=(-j 2 --profile mutants -o "target/mutants/$group" -C --lib)
    for t in ${TESTS[$group]}; do
        args+=(-C --test -C "$t")
    done
    for f in ${FILES[$group]}; do
        args+=(-f "$f")
    done
    echo "== $group: ${FILES[$group]}"
    mkdir -p "target/mutants/$group"
    skip=()
    for t in ${SKIP[$group]:-}; do
        skip+=(--skip "$t")
    done
    [[ ${#skip[@]} -gt 0 ]] && skip=(-- -- "${skip[@]}")
    cargo mutants "${args[@]}" "$@" "${skip[@]}" || true # survivors make it exit non-zero; the summary says which
    summarise "target/mutants/$group/mutants.out"
done
