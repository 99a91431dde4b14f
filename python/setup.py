"""Builds dcp-torch; build_py also generates the dcp.v1 stubs (build_stubs.py)
from ../proto/dcp/v1, or from $DCP_PROTO_DIR when set."""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_stubs  # noqa: E402


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        out_dir = os.path.join(self.build_lib, "dcp_torch", "_proto")
        build_stubs.generate(
            os.environ.get("DCP_PROTO_DIR", build_stubs.DEFAULT_PROTO_DIR),
            out_dir)


setup(cmdclass={"build_py": BuildPyWithStubs})
