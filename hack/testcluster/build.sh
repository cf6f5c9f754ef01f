#!/usr/bin/env bash
# Builds the local Kubernetes control plane used by the tests and the demo
# (kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok, kubectl)
# and the real node's kubelet (an older minor version, from its own module in
# kubelet/: kubelet v1.35 and later refuse a cgroup v1 hierarchy) from the Go
# module proxy, plus kwok's stage file (kwok's default stages and
# fault-stages.yaml).
#
# Output: <repo>/.bin/testcluster/ (or $STYRMIN_TESTCLUSTER_BIN).
# A stamp of the inputs' hash makes a repeated run return at once; a cold
# build takes about 12 minutes on 2 cores (the kubelet about 5 more), a
# warm-cache rebuild seconds.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${STYRMIN_TESTCLUSTER_BIN:-$repo/.bin/testcluster}"
kube_version="v1.37.2"
kubelet_version="v1.34.4"
binaries=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok kubectl kubelet)

cd "$here"

# Everything that decides the output: the module files, the mains, this
# script, the fault stages and the Go toolchain.
inputs_hash() {
	{
		go version
		sha256sum go.mod go.sum build.sh fault-stages.yaml kubelet/go.mod kubelet/go.sum kubelet/main.go
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

echo "testcluster: building ${binaries[*]} into ${out#"$repo"/} (first time: about 17 minutes)"
start=$SECONDS
rm -f "$out/.stamp"

# version_ldflags VERSION: the linker flags that stamp a Kubernetes version
# (without them /version and the node's kubelet version say v0.0.0).
version_ldflags() {
	local minor="${1#v1.}" flags="-s -w" pkg
	minor="${minor%%.*}"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $pkg.gitVersion=$1"
		flags+=" -X $pkg.gitMajor=1"
		flags+=" -X $pkg.gitMinor=$minor"
		flags+=" -X $pkg.gitTreeState=clean"
	done
	echo "$flags"
}

CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$(version_ldflags "$kube_version")" -o "$out/" ./cmd/...
(cd kubelet && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$(version_ldflags "$kubelet_version")" -o "$out/kubelet" .)

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
