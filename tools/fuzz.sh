#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for SECONDS each (default 20), one after the other on one
# core, and fails if any of them finds a crash (a panic, a hang past 10 s, an allocation past
# 2 GiB). Needs the nightly toolchain (it fails, saying so, without it) and installs cargo-fuzz
# when it is missing.
#
#   tools/fuzz.sh [SECONDS]
#
# Each target starts from its checked-in seeds (fuzz/corpus/<target>/) and crash inputs
# (fuzz/regressions/<target>/), which it only reads; what it finds goes to fuzz/target/corpus/
# (kept between runs, git-ignored) and a crash to fuzz/artifacts/<target>/. To keep a crash as a
# regression, copy its input to fuzz/regressions/<target>/: tests/fuzz_corpus.rs replays it on
# stable in `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-20}
if ! [[ $seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: tools/fuzz.sh [SECONDS]   (SECONDS per target, default 20)" >&2
  exit 2
fi

die() { echo "tools/fuzz.sh: $*" >&2; exit 1; }
command -v rustup >/dev/null || die "rustup is required (the fuzz targets build on the nightly toolchain)"
rustup toolchain list | grep -q '^nightly' \
  || die "the nightly toolchain is missing: rustup toolchain install nightly --profile minimal"
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

export CARGO_TERM_COLOR=never
targets=$(cargo +nightly fuzz list)
[ -n "$targets" ] || die "cargo fuzz list found no targets in fuzz/"
echo "== cargo fuzz build (release, debug assertions, AddressSanitizer)"
cargo +nightly fuzz build -O -a

failed=()
for target in $targets; do
  work=fuzz/target/corpus/$target
  mkdir -p "$work"
  dirs=("$work" "fuzz/corpus/$target")
  [ -d "fuzz/regressions/$target" ] && dirs+=("fuzz/regressions/$target")
  # libFuzzer prints a line per new input (thousands a run): it goes to a log file, and only
  # its final statistics, or its last lines after a crash, reach the console.
  log=fuzz/target/logs/$target.log
  mkdir -p fuzz/target/logs
  if cargo +nightly fuzz run -O -a "$target" "${dirs[@]}" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "== $target: ${seconds}s, ${runs:-?} inputs, no crash (log: $log)"
  else
    echo "== $target: CRASH (last lines of $log follow)"
    tail -n 60 "$log"
    failed+=("$target")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "tools/fuzz.sh: crashes found by: ${failed[*]} (inputs in fuzz/artifacts/<target>/;" \
    "replay one with: cargo +nightly fuzz run -O -a <target> <input>)" >&2
  exit 1
fi
echo "== every fuzz target ran ${seconds}s without a crash"
