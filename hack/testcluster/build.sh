#!/usr/bin/env bash
# Builds the local Kubernetes control plane used by the tests and the demo
# (kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok, kubectl)
# from the Go module proxy, plus kwok's stage file (kwok's default stages and
# fault-stages.yaml).
#
# Output: <repo>/.bin/testcluster/ (or $STYRMIN_TESTCLUSTER_BIN).
# A stamp of the inputs' hash makes a repeated run return at once; a cold
# build takes about 12 minutes on 2 cores, a warm-cache rebuild seconds.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${STYRMIN_TESTCLUSTER_BIN:-$repo/.bin/testcluster}"
kube_version="v1.37.2"
binaries=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok kubectl)

cd "$here"

# Everything that decides the output: the module files, the mains, this
# script, the fault stages and the Go toolchain.
inputs_hash() {
	{
		go version
		sha256sum go.mod go.sum build.sh fault-stages.yaml
		find cmd -type f -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
	} | sha256sum | cut -d' ' -f1
}

up_to_date() {
	[[ -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$1" ]] || return 1
	local b
	for b in "${binaries[@]}" kwok-stages.yaml; do
		[[ -e "$out/$b" ]] || return 1
	done
}

mkdir -p "$out"
# Serialise concurrent builds (two `make test` at once) when flock exists.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$out/.lock"
	flock 9
fi

want="$(inputs_hash)"
if up_to_date "$want"; then
	echo "testcluster: up to date in ${out#"$repo"/}"
	exit 0
fi

echo "testcluster: building ${binaries[*]} into ${out#"$repo"/} (first time: about 12 minutes)"
start=$SECONDS
rm -f "$out/.stamp"

minor="${kube_version#v1.}"
minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$kube_version"
	ldflags+=" -X $pkg.gitMajor=1"
	ldflags+=" -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean"
done

CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$out/" ./cmd/...

# kwok ships no built-in stages: concatenate its default ones, then ours
# (fault injection by pod annotation, see fault-stages.yaml; they carry a
# weight, so they win over a default stage that matches the same pod).
kwok_dir="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
stages=(
	node/fast/node-initialize.yaml
	node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
	pod/fast/pod-ready.yaml
	pod/fast/pod-complete.yaml
	pod/fast/pod-delete.yaml
)
{
	for s in "${stages[@]}"; do
		echo "---"
		cat "$kwok_dir/kustomize/stage/$s"
	done
	echo "---"
	cat fault-stages.yaml
} >"$out/kwok-stages.yaml.tmp"
mv "$out/kwok-stages.yaml.tmp" "$out/kwok-stages.yaml"

echo "$want" >"$out/.stamp"
echo "testcluster: built in $((SECONDS - start)) s"
