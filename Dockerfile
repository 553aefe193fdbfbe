# syntax=docker/dockerfile:1
#
# segmint: build with the Rust toolchain, run on a slim Debian with only the binary.
#   docker build -t segmint .
#
# Out of the box the image serves the embedded default (/etc/segmint/default.toml): one
# SQLite file in the volume /var/lib/segmint (data/segmint.db there). On the first start
# it creates the biz `test` and a token, and prints curl commands to try:
#   docker run --rm -p 9999:9999 -v segmint-data:/var/lib/segmint segmint
# Admin commands run in the same container or in another one on the same volume (several
# processes may share the file):
#   docker exec CONTAINER segmint token add --biz test
#   docker run --rm -v segmint-data:/var/lib/segmint segmint biz list
#
# For production, point it at PostgreSQL. The image holds config/ as /etc/segmint/:
# -e SEGMINT_CONFIG=/etc/segmint/postgres.toml selects the single-PostgreSQL file, whose
# database is postgres://postgres@127.0.0.1:5432/segmint (the host's, with --network host);
# SEGMINT_DATABASES replaces the file's database list with your own:
#   docker run --rm -p 9999:9999 -e SEGMINT_CONFIG=/etc/segmint/postgres.toml \
#     -e SEGMINT_DATABASES='[{name="pg", url="postgres://postgres@db.example:5432/segmint"}]' \
#     segmint
# Or mount your own configuration and point SEGMINT_CONFIG at it:
#   docker run --rm -p 9999:9999 -v "$PWD/segmint.toml:/etc/segmint/segmint.toml:ro" \
#     -e SEGMINT_CONFIG=/etc/segmint/segmint.toml segmint
# Create the schema once with the same settings: `docker run --rm … segmint migrate`.
# TLS to PostgreSQL needs no OpenSSL (rustls); mount the CA certificate and the password
# as files readable by the segmint user and name them in the database's entry:
#   -v "$PWD/ca.crt:/etc/segmint/ca.crt:ro" -v "$PWD/pg-password:/run/secrets/pg-password:ro" \
#   -e SEGMINT_DATABASES='[{name="pg", url="postgres://segmint@db.example:5432/segmint?sslmode=verify-full&sslrootcert=/etc/segmint/ca.crt", password_file="/run/secrets/pg-password"}]'
# (sslrootcert=system uses the image's ca-certificates.)

FROM rust:1-bookworm AS builder
WORKDIR /src

# Dependencies first, against stub sources: this layer is rebuilt only when a manifest
# or Cargo.lock changes, not on every change to segmint itself. Cargo reads every
# target the manifests declare, so each workspace crate (crates/*), bench and test
# target needs a stub; the image never builds the benches or tests, and their stubs
# stay for the build of the real sources. tests/dockerfile.rs runs the stub step and
# checks it covers every target the manifests declare.
COPY Cargo.toml Cargo.lock ./
COPY crates/core/Cargo.toml crates/core/
COPY crates/client/Cargo.toml crates/client/
COPY crates/config/Cargo.toml crates/config/
COPY crates/metrics/Cargo.toml crates/metrics/
COPY crates/store/Cargo.toml crates/store/
COPY crates/model/Cargo.toml crates/model/
RUN mkdir -p src benches tests/chaos tests/memory crates/model/tests/model \
    && for crate in core client config metrics store model; do \
           mkdir -p crates/$crate/src && touch crates/$crate/src/lib.rs; \
       done \
    && for target in src/main.rs benches/client.rs benches/server.rs benches/listing.rs \
           tests/main.rs tests/chaos/main.rs tests/memory/main.rs \
           crates/model/tests/model/main.rs; do \
           echo 'fn main() {}' > $target; \
       done \
    && touch src/lib.rs \
    && cargo build --release --locked --bin segmint \
    && rm -rf src crates/*/src

# The real sources. sql/ (one directory of migrations per dialect) is compiled in: the
# migrations are include_str!'d by crates/store. rusqlite builds its bundled SQLite
# with the image's C compiler (gcc).
COPY src ./src
COPY crates ./crates
COPY sql ./sql
# Forget the stubs' builds of segmint's own crates: COPY keeps the files' old
# modification times, which cargo could otherwise take for "already built".
RUN rm -rf target/release/.fingerprint/segmint* target/release/deps/segmint* \
        target/release/deps/libsegmint* target/release/segmint \
    && cargo build --release --locked --bin segmint


FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# The state directory is created and handed to the non-root user before it is declared
# a VOLUME: a fresh named volume starts as a copy of it, ownership included.
RUN useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin segmint \
    && install -d -o segmint -g segmint -m 0750 /var/lib/segmint

COPY --from=builder /src/target/release/segmint /usr/local/bin/segmint
# default.toml (embedded), postgres.toml, two-databases.toml, embedded-two.toml.
COPY config/ /etc/segmint/

# The files' bind address is loopback; in a container the server must listen on all
# interfaces. The embedded default's relative path sqlite://data/segmint.db resolves
# against the working directory: /var/lib/segmint/data/segmint.db, in the volume. A
# host directory mounted there instead must be writable by the segmint user.
ENV SEGMINT_CONFIG=/etc/segmint/default.toml \
    SEGMINT_BIND=0.0.0.0:9999
WORKDIR /var/lib/segmint
VOLUME ["/var/lib/segmint"]

USER segmint
EXPOSE 9999
# No HEALTHCHECK: the image has no HTTP client (curl or wget) to run one with, on
# purpose. Let the orchestrator probe over HTTP instead: GET /healthz (liveness)
# and GET /readyz (readiness: 503 while no database answers).
ENTRYPOINT ["segmint"]
CMD ["serve"]
