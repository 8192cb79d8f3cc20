#!/usr/bin/env bash
# release-check: compare the exported API of each public module (sdk/core,
# sdk/go) in the work tree with the module's previous release tag
# (sdk/core/vX.Y.Z, sdk/go/vX.Y.Z), using apidiff. It prints every change,
# and fails on an incompatible one unless NEXT, the version about to be
# tagged, is a major bump over that tag, or, while the module is at v0
# (where Go promises no compatibility), a minor bump. A module with no
# previous tag has nothing to compare against: it says so and passes.
#
#   scripts/release-check.sh
#   NEXT=v1.0.0 scripts/release-check.sh
#
# APIDIFF names the apidiff command to `go run` (module path@version).
set -euo pipefail

APIDIFF=${APIDIFF:-golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4}
NEXT=${NEXT:-}
MODULES=(sdk/core sdk/go)
PREFIX=github.com/fila-mq/fila

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

major() { # v1.2.3 -> 1
	local v=${1#v}
	echo "${v%%.*}"
}

minor() { # v1.2.3 -> 2
	local v=${1#v}
	v=${v#*.}
	echo "${v%%.*}"
}

# breaking NEXT PREV: whether NEXT may break PREV's API: a major bump, or
# a minor bump at v0.
breaking() {
	local nm pm
	nm=$(major "$1") pm=$(major "$2")
	((nm > pm)) && return 0
	((nm == 0 && pm == 0)) && (($(minor "$1") > $(minor "$2")))
}

if [[ -n $NEXT && ! $NEXT =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]]; then
	echo "release-check: NEXT=$NEXT is not a version vX.Y.Z" >&2
	exit 2
fi

# prepare DIR: make each module in the copy of the tree at DIR build
# from DIR alone, its requirement on a sibling module replaced by the
# sibling's directory there (no version of it needs to be on a proxy).
prepare() {
	local dir=$1 m other
	for m in "${MODULES[@]}"; do
		[[ -f $dir/$m/go.mod ]] || continue
		for other in "${MODULES[@]}"; do
			if [[ $other != "$m" ]] && grep -q "^[[:space:]]*\(require[[:space:]]\+\)\?$PREFIX/$other[[:space:]]" "$dir/$m/go.mod"; then
				(cd "$dir/$m" && go mod edit -replace "$PREFIX/$other=$dir/$other")
			fi
		done
	done
}

# export_api DIR MODULE OUT: write the API of DIR/MODULE to OUT. The copy
# may let the go command tidy its go.mod (-mod=mod): a module's go.mod
# names only what it needs inside the workspace.
export_api() {
	(cd "$1/$2" && GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=mod" go run "$APIDIFF" -m -w "$3" "$PREFIX/$2")
}

failed=()
for m in "${MODULES[@]}"; do
	prev=$(git describe --tags --match "$m/v*" --abbrev=0 2>/dev/null) || prev=""
	if [[ -z $prev ]]; then
		echo "$m: no previous tag ($m/v*); nothing to compare"
		continue
	fi
	prevVersion=${prev#"$m/"}
	old=$tmp/old-${m//\//-}
	new=$tmp/new-${m//\//-}
	mkdir -p "$old" "$new"
	git archive "$prev" sdk | tar -x -C "$old"
	if [[ ! -f $old/$m/go.mod ]]; then
		echo "$m: $prev has no module $m; nothing to compare"
		continue
	fi
	cp -R sdk "$new/"
	prepare "$old"
	prepare "$new"
	export_api "$old" "$m" "$tmp/old.api"
	export_api "$new" "$m" "$tmp/new.api"
	report=$(cd "$tmp" && GOWORK=off go run "$APIDIFF" -m "$tmp/old.api" "$tmp/new.api")
	if [[ -z $report ]]; then
		echo "$m: no API change since $prev"
		continue
	fi
	echo "$m: API changes since $prev:"
	sed 's/^/    /' <<<"$report"
	if grep -q '^Incompatible changes:' <<<"$report"; then
		if [[ -n $NEXT ]] && breaking "$NEXT" "$prevVersion"; then
			echo "$m: incompatible changes allowed: $NEXT is a major version after $prevVersion, or a minor one at v0"
		elif (($(major "$prevVersion") == 0)); then
			echo "$m: incompatible changes since $prev need a new minor version at v0 (NEXT=v0.$(($(minor "$prevVersion") + 1)).0)"
			failed+=("$m")
		else
			echo "$m: incompatible changes since $prev need a major version (NEXT=v$(($(major "$prevVersion") + 1)).0.0)"
			failed+=("$m")
		fi
	fi
done

if ((${#failed[@]} > 0)); then
	echo "release-check: incompatible API changes in ${failed[*]}" >&2
	exit 1
fi
