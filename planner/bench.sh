#!/bin/sh
# Measures the planner against `helm template` run as one process per
# deployment, in the same `go test` run: builds the helm CLI from the Helm
# module this module uses, then runs BenchmarkPlanClusterFanOut1000 (a
# cluster change fanning out to 1,000 generated deployments).
#
#   planner/bench.sh            # 3 iterations of each part
#   BENCHTIME=5x planner/bench.sh
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/helm" helm.sh/helm/v4/cmd/helm
"$tmp/helm" version --short
STYRMIN_HELM="$tmp/helm" go test ./planner -run '^$' -bench 'ClusterFanOut1000' \
	-benchtime "${BENCHTIME:-3x}" -count 1 -timeout 60m
