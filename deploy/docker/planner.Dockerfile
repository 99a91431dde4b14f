# syntax=docker/dockerfile:1
# The dcp_planner image. Build from the repository root (BuildKit, Docker 23+;
# planner.Dockerfile.dockerignore keeps Bazel's output links out):
#   docker build -f deploy/docker/planner.Dockerfile -t registry.example.com/dcp/dcp-planner:latest .

# Build: Debian's toolchain and libraries (scripts/install_deps.sh), Bazel
# offline, as for development.
FROM debian:bookworm AS build
ENV DCP_SKIP_DEPLOY_TOOLS=1
ENV DCP_SKIP_BROWSER=1
WORKDIR /src
COPY scripts/install_deps.sh scripts/install_deps.sh
RUN bash scripts/install_deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN bazel build //planner/service:dcp_planner \
    && install -D -m 0755 bazel-bin/planner/service/dcp_planner /out/dcp_planner

# Run: only the shared libraries dcp_planner links (checked against
# `readelf -d` by //deploy:deploy_test).
FROM debian:bookworm-slim
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
COPY --from=build /out/dcp_planner /usr/local/bin/dcp_planner
USER 10001:10001
EXPOSE 50051 9464
ENTRYPOINT ["/usr/local/bin/dcp_planner"]
# Beyond loopback the planner requires a token: mount one and add
# --token-file=FILE, or set DCP_PLANNER_TOKEN (or --allow-unauthenticated).
CMD ["--listen=0.0.0.0:50051", "--metrics-listen=0.0.0.0:9464"]
