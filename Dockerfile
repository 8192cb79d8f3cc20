# fila-server in a container: a static build on a distroless base, run as
# a non-root user (65532), its data in the volume /var/lib/fila.
#
#   docker build --build-arg VERSION=0.1.0 -t fila-server .
#   docker run -p 5555:5555 -v fila-data:/var/lib/fila fila-server
#
# Settings come from FILA_<SECTION>_<KEY> variables (docker run -e) or a
# fila.toml mounted at /etc/fila/fila.toml; see docs/configuration.md.
# The image holds the fila CLI as well (docker exec <container> fila ...).

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY . .
ARG VERSION=dev
# The same flags as the release archives (scripts/dist.sh).
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/fila-server ./broker/cmd/fila-server \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/fila ./cli/cmd/fila \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fila-server /out/fila /usr/local/bin/
# The volume's directory exists in the image, owned by the user the
# broker runs as, so a new volume starts writable by it.
COPY --from=build --chown=65532:65532 /out/data /var/lib/fila
ENV FILA_STORAGE_DATA_DIR=/var/lib/fila
USER 65532:65532
WORKDIR /var/lib/fila
VOLUME ["/var/lib/fila"]
EXPOSE 5555
ENTRYPOINT ["/usr/local/bin/fila-server"]
