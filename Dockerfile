# syntax=docker/dockerfile:1
#
# segmint: build with the Rust toolchain, run on a slim Debian with only the binary.
#   docker build -t segmint .
#   docker run --rm -p 9999:9999 \
#     -e SEGMINT_DATABASES='[{name="pg", url="postgres://postgres@db.example:5432/segmint"}]' \
#     segmint
# Admin commands use the same image: `docker run --rm -e SEGMINT_DATABASES=… segmint migrate`.

FROM rust:1-bookworm AS builder
WORKDIR /src

# Dependencies first, against stub sources: this layer is rebuilt only when
# Cargo.toml or Cargo.lock change, not on every change to segmint itself.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked --bin segmint \
    && rm -rf src

# The real sources. sql/ is compiled in (the migrations are include_str!'d).
COPY src ./src
COPY sql ./sql
# Forget the stub's build of segmint itself: COPY keeps the files' old modification
# times, which cargo could otherwise take for "already built".
RUN rm -rf target/release/.fingerprint/segmint-* target/release/deps/segmint-* \
        target/release/deps/libsegmint-* target/release/segmint \
    && cargo build --release --locked --bin segmint


FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin segmint

COPY --from=builder /src/target/release/segmint /usr/local/bin/segmint
COPY config/ /etc/segmint/

# The file's bind address is loopback; in a container the server must listen on all
# interfaces. Databases: mount a configuration over /etc/segmint/default.toml, point
# SEGMINT_CONFIG elsewhere, or set SEGMINT_DATABASES as in the example above.
ENV SEGMINT_CONFIG=/etc/segmint/default.toml \
    SEGMINT_BIND=0.0.0.0:9999

USER segmint
EXPOSE 9999
# No HEALTHCHECK: the image has no HTTP client (curl or wget) to run one with, on
# purpose. Let the orchestrator probe over HTTP instead: GET /healthz (liveness)
# and GET /readyz (readiness: 503 while no database answers).
ENTRYPOINT ["segmint"]
CMD ["serve"]
