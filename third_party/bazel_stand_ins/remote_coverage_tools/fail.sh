#!/bin/sh
# Stand-in coverage tool: this workspace does not support `bazel coverage`.
echo "remote_coverage_tools stand-in: coverage is not supported offline" >&2
exit 1
