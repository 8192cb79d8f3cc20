#!/usr/bin/env bash
# dist: release archives of fila-server and fila for linux/amd64 and
# linux/arm64, and their SHA-256 checksums, in dist/:
#
#   dist/fila_<version>_linux_amd64.tar.gz
#   dist/fila_<version>_linux_arm64.tar.gz
#   dist/SHA256SUMS
#
# Each archive holds one directory, fila_<version>_linux_<arch>, with the
# two static binaries (CGO_ENABLED=0, -trimpath), LICENSE, README.md,
# CHANGELOG.md and the systemd unit. VERSION defaults to the broker's
# release tag (broker/vX.Y.Z) as `git describe` names HEAD from it, or
# dev-<commit> before the first tag; fila-server reports it
# (--version, the handshake's server name, the startup log).
set -euo pipefail

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
cd "$root"

if [[ -z ${VERSION:-} ]]; then
	VERSION=$(git describe --tags --match 'broker/v*' --always --dirty)
	if [[ $VERSION == broker/v* ]]; then
		VERSION=${VERSION#broker/v}
	else
		VERSION=dev-$VERSION
	fi
fi
ARCHES=${ARCHES:-amd64 arm64}
# The release build's flags; broker/cmd/fila-server/static_test.go
# builds and runs fila-server with the same.
LDFLAGS="-s -w -X main.version=$VERSION"
# Archive entries get the commit's time, so that the same commit gives
# the same archives.
mtime=$(git log -1 --format=%ct)

out=$root/dist
rm -rf "$out"
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

for arch in $ARCHES; do
	name=fila_${VERSION}_linux_$arch
	dir=$stage/$name
	mkdir -p "$dir"
	echo "building $name"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$LDFLAGS" -o "$dir/fila-server" ./broker/cmd/fila-server
	# The CLI reports the Go SDK's version (fila.Version), a constant.
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "-s -w" -o "$dir/fila" ./cli/cmd/fila
	cp LICENSE README.md CHANGELOG.md packaging/systemd/fila-server.service "$dir/"
	chmod 0755 "$dir/fila-server" "$dir/fila"
	chmod 0644 "$dir/LICENSE" "$dir/README.md" "$dir/CHANGELOG.md" "$dir/fila-server.service"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
		-C "$stage" -cf - "$name" | gzip -9 -n >"$out/$name.tar.gz"
done

(cd "$out" && sha256sum -- *.tar.gz >SHA256SUMS)
echo "dist/:"
(cd "$out" && ls -l -- *.tar.gz SHA256SUMS && cat SHA256SUMS)
