"""Generates the dcp-torch gRPC stubs from proto/dcp/v1/*.proto.

The stubs are never committed: `pip install ./python` runs this (setup.py's
build_py), and the tests run it on the source tree (tests/run_all.sh), so the
Python and C++ sides always speak the same dcp.v1.

The .proto files import each other as "dcp/v1/NAME.proto", which protoc
would turn into a top-level Python package `dcp` (a name that belongs to
others on PyPI, and the usual alias of torch.distributed.checkpoint). So the
files are copied into a staging folder as dcp_torch/_proto/NAME.proto with
those import lines rewritten, and the stubs import each other as
`dcp_torch._proto.NAME_pb2`. The protobuf package (dcp.v1) and so the wire
format are unchanged.

Usage: python build_stubs.py [--proto-dir DIR] [--out-dir DIR]
(defaults: ../proto/dcp/v1 and dcp_torch/_proto beside this file).
"""

import argparse
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROTO_DIR = os.path.join(HERE, os.pardir, "proto", "dcp", "v1")
DEFAULT_OUT_DIR = os.path.join(HERE, "dcp_torch", "_proto")
_IMPORT = re.compile(r'^import "dcp/v1/([A-Za-z0-9_]+\.proto)";', re.MULTILINE)


def generate(proto_dir=DEFAULT_PROTO_DIR, out_dir=DEFAULT_OUT_DIR):
    """Writes NAME_pb2.py (and NAME_pb2_grpc.py for services) into out_dir.

    Returns the list of files written. Raises FileNotFoundError when
    proto_dir has no .proto files and RuntimeError when protoc fails.
    """
    from grpc_tools import protoc  # a build-time dependency only

    proto_dir = os.path.abspath(proto_dir)
    names = sorted(n for n in os.listdir(proto_dir) if n.endswith(".proto")) \
        if os.path.isdir(proto_dir) else []
    if not names:
        raise FileNotFoundError(
            f"no .proto files in {proto_dir}; build dcp-torch from the DCP "
            "repository (python/ beside proto/) or pass --proto-dir")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as staging:
        package_dir = os.path.join(staging, "dcp_torch", "_proto")
        os.makedirs(package_dir)
        for name in names:
            with open(os.path.join(proto_dir, name), encoding="utf-8") as f:
                text = f.read()
            text = _IMPORT.sub(r'import "dcp_torch/_proto/\1";', text)
            with open(os.path.join(package_dir, name), "w",
                      encoding="utf-8") as f:
                f.write(text)
        include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
        args = ["grpc_tools.protoc", f"-I{staging}", f"-I{include}",
                f"--python_out={staging}", f"--grpc_python_out={staging}"]
        args += [f"dcp_torch/_proto/{name}" for name in names]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {proto_dir}: {' '.join(args)}")
        written = []
        for name in sorted(os.listdir(package_dir)):
            if not name.endswith(".py"):
                continue
            shutil.copy(os.path.join(package_dir, name),
                        os.path.join(out_dir, name))
            written.append(os.path.join(out_dir, name))
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proto-dir", default=DEFAULT_PROTO_DIR)
    parser.add_argument("--out-dir", default=DEFAULT_OUT_DIR)
    args = parser.parse_args(argv)
    written = generate(args.proto_dir, args.out_dir)
    print(f"build_stubs: wrote {len(written)} files to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
