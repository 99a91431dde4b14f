#!/usr/bin/env bash
# //planner/cli:report_browser_test: runs report_browser_test.py (see its
# docstring) with the system Python 3 (standard library only).
set -euo pipefail
root="${TEST_SRCDIR:-.}/dcp"
[[ -d "${root}/planner" ]] || root="."
exec python3 "${root}/planner/cli/report_browser_test.py"
