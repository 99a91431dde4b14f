# syntax=docker/dockerfile:1
# The dcp_worker image: dcp_worker and dcp-node-launcher (the pod's
# entrypoint, one dcp_worker per rank). Build from the repository root
# (BuildKit, Docker 23+):
#   CPU (Debian's LibTorch 1.13, Gloo):
#     docker build -f deploy/docker/worker.Dockerfile -t registry.example.com/dcp/dcp-worker:cpu .
#   GPU: with an unpacked CUDA LibTorch distribution (cxx11 ABI; its lib/
#   carries the CUDA runtime, cuDNN and NCCL; the node's NVIDIA container
#   runtime provides the driver):
#     docker build -f deploy/docker/worker.Dockerfile --build-context libtorch=/path/to/libtorch \
#       -t registry.example.com/dcp/dcp-worker:cuda .

# Empty unless --build-context libtorch=DIR is given.
FROM scratch AS libtorch

FROM debian:bookworm AS build
ENV DCP_SKIP_DEPLOY_TOOLS=1
ENV DCP_SKIP_BROWSER=1
WORKDIR /src
COPY scripts/install_deps.sh scripts/install_deps.sh
RUN bash scripts/install_deps.sh && rm -rf /var/lib/apt/lists/*
COPY --from=libtorch / /opt/libtorch/
COPY . .
# LIBTORCH_HOME (third_party/libtorch/libtorch.bzl) when a LibTorch was given;
# the binary gets an rpath to /opt/libtorch/lib.
RUN if [ -d /opt/libtorch/lib ]; then export LIBTORCH_HOME=/opt/libtorch; fi \
    && bazel build //worker:dcp_worker \
    && install -D -m 0755 bazel-bin/worker/dcp_worker /out/dcp_worker \
    && mkdir -p /opt/libtorch/lib

# Run: only the shared libraries dcp_worker links (checked against
# `readelf -d` by //deploy:deploy_test); Debian's LibTorch unless a LibTorch
# came with the build.
FROM debian:bookworm-slim
COPY --from=build /opt/libtorch/lib /opt/libtorch/lib
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libabsl20220623 \
        libatomic1 \
        libc-ares2 \
        libgrpc++1.51 \
        libgrpc29 \
        libprometheus-cpp-core1.0 \
        libprometheus-cpp-pull1.0 \
        libprotobuf32 \
        libre2-9 \
        libssl3 \
        zlib1g \
    && if [ ! -e /opt/libtorch/lib/libtorch.so ]; then \
        apt-get install -y --no-install-recommends libtorch1.13; \
    fi \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 dcp \
    && useradd --system --uid 10001 --gid dcp --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin dcp
COPY --from=build /out/dcp_worker /usr/local/bin/dcp_worker
COPY --chmod=0755 deploy/docker/dcp-node-launcher.sh /usr/local/bin/dcp-node-launcher
USER 10001:10001
EXPOSE 9500-9507 29500-29507
ENTRYPOINT ["/usr/local/bin/dcp-node-launcher"]
