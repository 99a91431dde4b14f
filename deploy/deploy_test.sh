#!/usr/bin/env bash
# //deploy:deploy_test: runs deploy_test.py (see its docstring) with the
# Python of the deploy tools' environment, which scripts/install_deps.sh
# makes ($DCP_DEPLOY_TOOLS, default /opt/dcp/deploy-tools; it has PyYAML).
set -euo pipefail
tools="${DCP_DEPLOY_TOOLS:-/opt/dcp/deploy-tools}"
if [[ ! -x "${tools}/bin/python3" ]]; then
  echo "deploy_test: no deploy tools in ${tools}; run scripts/install_deps.sh" >&2
  exit 1
fi
root="${TEST_SRCDIR:-.}/dcp"
[[ -d "${root}/deploy" ]] || root="."
exec "${tools}/bin/python3" "${root}/deploy/deploy_test.py"
