#!/usr/bin/env bash
# Installs the Debian packages the build needs, only those that are missing.
# Idempotent and non-interactive; runs `apt-get update` only when something is
# missing. Needs root (or sudo) only in that case.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  googletest
  libabsl-dev
  libbenchmark-dev
  libgloo-dev
  libgrpc++-dev
  libgtest-dev
  libprotobuf-dev
  libtorch-dev
  nlohmann-json3-dev
  openssl
  prometheus-cpp-dev
  protobuf-compiler
  protobuf-compiler-grpc
)

missing=()
for package in "${PACKAGES[@]}"; do
  if dpkg -s "${package}" >/dev/null 2>&1 &&
     [[ "$(dpkg-query -W -f='${Status}' "${package}" 2>/dev/null)" == "install ok installed" ]]; then
    echo "install_deps: ${package} is installed"
  else
    missing+=("${package}")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi

echo "install_deps: missing: ${missing[*]}"
sudo=()
if [[ "$(id -u)" -ne 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install_deps: not root and no sudo; install as root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  sudo=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
echo "install_deps: apt-get update"
"${sudo[@]}" apt-get update -q
echo "install_deps: apt-get install ${missing[*]}"
"${sudo[@]}" apt-get install -y -q "${missing[@]}"
echo "install_deps: done"
