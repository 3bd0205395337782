# The built-in lock server in a container. There is no container daemon on
# the project's machines: CI checks this file with hadolint, it is not built
# there. Build and run:
#   docker build -t lc-cli .
#   docker run -p 22119:22119 -v lc-data:/data lc-cli
#
# Build stage: nothing but a Rust toolchain is needed (no protoc).
FROM rust:1.88-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked \
    && install -D -m 0755 target/release/lc-cli /out/lc-cli \
    && install -d -m 0755 /out/data

# Final stage: glibc and nothing else, no shell, a non-root user (65532).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/lc-cli /usr/local/bin/lc-cli
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
EXPOSE 22119
VOLUME ["/data"]
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
    CMD ["/usr/local/bin/lc-cli", "ping", "--server", "127.0.0.1:22119"]
ENTRYPOINT ["/usr/local/bin/lc-cli"]
CMD ["serve", "--listen", "0.0.0.0:22119", "--data", "/data/wal"]
