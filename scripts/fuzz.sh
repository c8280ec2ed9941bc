#!/usr/bin/env bash
# Fuzzes jvmperf's parsers of untrusted input (fuzz/, cargo-fuzz + libFuzzer) for a bounded time:
#   scripts/fuzz.sh [seconds-per-target] [target...]     (default: 60 s, every target)
# Each target starts from its committed seed corpus (fuzz/corpus/<target>/), copied to a temporary
# directory so that a run never adds files to the repository. Any crash, panic, input slower than
# 5 s, single allocation above 512 MB or RSS above 2 GB fails the run; the input that did it is kept
# under fuzz/artifacts/<target>/ (git-ignored) and can be replayed with
#   cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>
# Needs a nightly toolchain (rustup's `nightly` if installed, else stable with RUSTC_BOOTSTRAP=1)
# and installs cargo-fuzz (0.13.2, from crates.io) when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(shim_protocol perf_record vmstructs jfr)
case "$secs" in '' | *[!0-9]*) echo "fuzz.sh: seconds must be a number, got '$secs'" >&2; exit 2 ;; esac

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz"
  cargo install cargo-fuzz --version 0.13.2 --locked
fi

# cargo-fuzz needs nightly features (sanitizers, -Z flags).
if command -v rustup >/dev/null 2>&1 && rustup run nightly rustc --version >/dev/null 2>&1; then
  cargo_fuzz=(cargo +nightly fuzz)
  toolchain="$(rustup run nightly rustc --version)"
else
  cargo_fuzz=(cargo fuzz)
  export RUSTC_BOOTSTRAP=1
  toolchain="$(rustc --version) with RUSTC_BOOTSTRAP=1 (no nightly toolchain)"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/jvmperf-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT

start=$SECONDS
echo "fuzz.sh: building ${targets[*]} with $toolchain"
# Unoptimized (--dev): a fresh release build of the targets with their sanitizers took ~11 min
# here, an unoptimized one ~4 min; for short runs the build is most of the time.
for t in "${targets[@]}"; do
  "${cargo_fuzz[@]}" build --dev "$t"
done
echo "fuzz.sh: build took $((SECONDS - start)) s"

failed=0
summary=()
for t in "${targets[@]}"; do
  mkdir -p "$work/corpus/$t" "fuzz/artifacts/$t"
  cp -R "fuzz/corpus/$t/." "$work/corpus/$t/"
  seeds=$(find "$work/corpus/$t" -type f | wc -l)
  log="$work/$t.log"
  echo "fuzz.sh: $t for $secs s from $seeds seed inputs"
  extra=()
  # Ring-buffer records go up to 64 KiB (u16 sizes); libFuzzer's default stops at 4 KiB.
  [ "$t" = perf_record ] && extra+=(-max_len=65536)
  status=0
  "${cargo_fuzz[@]}" run --dev "$t" "$work/corpus/$t" -- \
    -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -malloc_limit_mb=512 \
    -print_final_stats=1 "${extra[@]}" >"$log" 2>&1 || status=$?
  stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
  runs=$(stat number_of_executed_units)
  rate=$(stat average_exec_per_sec)
  rss=$(stat peak_rss_mb)
  corpus=$(find "$work/corpus/$t" -type f | wc -l)
  if [ "$status" -eq 0 ] && [ -n "$runs" ]; then
    crashes=0
  else
    crashes=1
    failed=1
    echo "fuzz.sh: $t FAILED (exit $status); the end of its log:" >&2
    tail -n 40 "$log" >&2
    echo "fuzz.sh: $t: what went wrong:" >&2
    grep -E -A1 "panicked at|ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|^SUMMARY:|Test unit written" \
      "$log" | head -n 20 >&2 || true
  fi
  line="$t: ${runs:-?} runs, ${rate:-?} execs/s, corpus $seeds -> $corpus inputs, peak RSS ${rss:-?} MB, crashes: $crashes"
  echo "fuzz.sh: $line"
  summary+=("$line")
done

echo "fuzz.sh: summary after $((SECONDS - start)) s (${secs} s per target):"
printf '  %s\n' "${summary[@]}"
if [ "$failed" -ne 0 ]; then
  echo "fuzz.sh: FAILED: reproducers are under fuzz/artifacts/" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets, no crashes"
