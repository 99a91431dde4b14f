"""C++ code generation for .proto files with the system `protoc` (offline).

Bazel 4.2.3's native proto rules would fetch @com_google_protobuf; instead a
genrule runs Debian's `protoc` (and `grpc_cpp_plugin` for services) and a
cc_library compiles the result against Debian's runtime (@system).
"""

def dcp_cc_proto(name, srcs, deps = [], grpc = False, visibility = None, testonly = False):
    """Generates and compiles C++ for `srcs`.

    The import root is the calling package's folder, so with the call in
    //proto, `proto/dcp/v1/plan.proto` is imported as "dcp/v1/plan.proto" and
    its header included as "dcp/v1/plan.pb.h".

    Makes:
      <name>: cc_library with the generated messages (and gRPC stubs when
        grpc = True: "dcp/v1/<file>.grpc.pb.h").
      <name>_protos: filegroup of `srcs`, used by dependents' code generation.

    Args:
      name: name of the cc_library.
      srcs: .proto files in this package (may be in sub-folders).
      deps: other dcp_cc_proto targets in this package whose files `srcs`
        import, as ":target" (their "<target>_protos" are code-generation inputs).
      grpc: also generate gRPC service stubs and link gRPC.
      visibility: visibility of the cc_library.
      testonly: forwarded to the generated targets.
    """
    package = native.package_name()
    for src in srcs:
        if not src.endswith(".proto") or src.startswith(":") or src.startswith("//"):
            fail("dcp_cc_proto(name = %r): srcs must be .proto files of this package, got %r" % (name, src))

    bases = [src[:-len(".proto")] for src in srcs]
    message_hdrs = [b + ".pb.h" for b in bases]
    message_srcs = [b + ".pb.cc" for b in bases]
    grpc_hdrs = [b + ".grpc.pb.h" for b in bases] if grpc else []
    grpc_srcs = [b + ".grpc.pb.cc" for b in bases] if grpc else []

    native.filegroup(
        name = name + "_protos",
        srcs = srcs + [d + "_protos" for d in deps],
        testonly = testonly,
        visibility = visibility,
    )

    import_root = package if package else "."
    cmd = "protoc -I{root} --cpp_out=$(RULEDIR)".format(root = import_root)
    if grpc:
        cmd += (" --grpc_out=$(RULEDIR)" +
                " --plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin)")
    cmd += " " + " ".join(["$(location %s)" % src for src in srcs])

    native.genrule(
        name = name + "_generate",
        srcs = srcs + [d + "_protos" for d in deps],
        outs = message_hdrs + message_srcs + grpc_hdrs + grpc_srcs,
        cmd = cmd,
        message = "Generating C++ for %s with the system protoc" % name,
        testonly = testonly,
        visibility = ["//visibility:private"],
    )

    native.cc_library(
        name = name,
        srcs = message_srcs + grpc_srcs,
        hdrs = message_hdrs + grpc_hdrs,
        # Generated files include each other as "dcp/v1/<file>.pb.h".
        includes = ["."],
        deps = deps + ["@system//:protobuf"] + (["@system//:grpc++"] if grpc else []),
        testonly = testonly,
        visibility = visibility,
    )
