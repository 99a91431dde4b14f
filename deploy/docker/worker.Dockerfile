# syntax=docker/dockerfile:1
# The dcp_worker image: dcp_worker and dcp-node-launcher (the pod's
# entrypoint, one dcp_worker per rank), built against the pinned PyPI torch
# wheel (third_party/libtorch/requirements.txt, scripts/install_torch.sh).
# Build from the repository root (BuildKit, Docker 23+):
#   CPU (Gloo):
#     docker build -f deploy/docker/worker.Dockerfile -t registry.example.com/dcp/dcp-worker:cpu .
#   GPU (NCCL): the CUDA build (`bazel build --config=cuda`) against the same
#   wheel and its pinned CUDA libraries from PyPI (CUDA runtime, cuBLAS, cuDNN,
#   NCCL, ...; third_party/libtorch/cuda_requirements.txt); the node's NVIDIA
#   container runtime provides the driver:
#     docker build -f deploy/docker/worker.Dockerfile --build-arg DCP_CUDA=1 \
#       -t registry.example.com/dcp/dcp-worker:cuda .

FROM debian:bookworm AS build
ARG DCP_CUDA=0
ENV DCP_SKIP_DEPLOY_TOOLS=1 DCP_SKIP_BROWSER=1 DCP_TORCH_CUDA=${DCP_CUDA}
WORKDIR /src
COPY scripts/install_deps.sh scripts/install_torch.sh scripts/
COPY third_party/libtorch/*requirements.txt third_party/libtorch/
RUN bash scripts/install_deps.sh && rm -rf /var/lib/apt/lists/* /root/.cache/pip
COPY . .
# With DCP_CUDA=1, install_torch.sh assembled the CUDA libraries' headers and
# libraries in /opt/dcp/torch-venv/cuda, the CUDA_HOME of the CUDA build.
RUN config="" \
    && if [ "${DCP_CUDA}" = 1 ]; then config=--config=cuda; export CUDA_HOME=/opt/dcp/torch-venv/cuda; fi \
    && bazel build ${config} //worker:dcp_worker \
    && install -D -m 0755 bazel-bin/worker/dcp_worker /out/dcp_worker

# Run: only the shared libraries dcp_worker links (checked against
# `readelf -d` by //deploy:deploy_test): the torch wheel's lib/ (at the path
# of the binary's rpath) with the CUDA libraries it needs from PyPI
# (site-packages/nvidia, on its rpath), and Debian's packages of the rest.
FROM debian:bookworm-slim
COPY --from=build /opt/dcp/torch-venv/lib/python3.11/site-packages/torch/lib \
    /opt/dcp/torch-venv/lib/python3.11/site-packages/torch/lib
COPY --from=build /opt/dcp/torch-venv/lib/python3.11/site-packages/nvidia \
    /opt/dcp/torch-venv/lib/python3.11/site-packages/nvidia
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
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 dcp \
    && useradd --system --uid 10001 --gid dcp --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin dcp
COPY --from=build /out/dcp_worker /usr/local/bin/dcp_worker
COPY --chmod=0755 deploy/docker/dcp-node-launcher.sh /usr/local/bin/dcp-node-launcher
USER 10001:10001
EXPOSE 9500-9507 29500-29507
ENTRYPOINT ["/usr/local/bin/dcp-node-launcher"]
