# Styrmin: common tasks. `make help` lists them.
#
# The tests and the demo run a real Kubernetes control plane built from the Go
# module proxy (hack/testcluster); `make testcluster` builds it once (about
# 12 minutes on 2 cores) and is instant afterwards.

GO           ?= go
TEST_TIMEOUT ?= 45m
TESTCLUSTER  := .bin/testcluster
KUBECTL      := $(TESTCLUSTER)/kubectl
CLUSTERCTL   := .bin/clusterctl
KUBECONFIG_LOCAL := .cluster/kubeconfig

# What the binaries and the image are stamped with (package version): the
# version (the tag, or the commit; "-dirty" for a modified tree), the commit
# and its time.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
# The image's creation time and every file time in it: the commit's, so
# that two builds of one commit have the same digest.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
COMMIT_DATE ?= $(shell TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null)
# -trimpath: no build machine's folders in the binaries. -buildvcs=false:
# the commit is stamped instead, since Go's own record depends on the
# checkout (it finds no repository from a git worktree, golang/go#58218).
VERSION_PKG := github.com/styrmin/styrmin/version
GO_BUILD_FLAGS := -trimpath -buildvcs=false -ldflags "-X $(VERSION_PKG).stamped=$(VERSION) -X $(VERSION_PKG).stampedCommit=$(REVISION) -X $(VERSION_PKG).stampedDate=$(COMMIT_DATE)"

.DEFAULT_GOAL := help

.PHONY: help build image testcluster test bench bench-ui ui-screenshots bench-agent bench-scale bench-agent-waves bench-lock bench-cli bench-controller lint clusterctl cluster-up cluster-down cluster-status demo

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{ printf "  %-15s %s\n", $$1, $$2 }'

build: ## Build the commands into ./bin, stamped with the version (git describe; VERSION=… to set it).
	$(GO) build $(GO_BUILD_FLAGS) -o ./bin/ ./cmd/...

image: ## Build the agent's OCI image (linux/amd64, linux/arm64; no Docker) into bin/image/styrmin-agent-oci; push with crane or skopeo (README).
	$(GO) run ./hack/image --go "$(GO)" --version "$(VERSION)" --revision "$(REVISION)" --created "$(SOURCE_DATE_EPOCH)" --out bin/image

testcluster: ## Build the local control plane into .bin/testcluster (once; then up to date in <1 s).
	hack/testcluster/build.sh

# The tests of code that runs goroutines over shared state, again under the
# race detector (the whole suite under it would take several times as long).
# Not the hostile drivers: under an address-space limit the race detector's
# own allocations fail first.
# RACE_PACKAGES are the packages that hold them: linking a test binary
# under the race detector for a package with none of them took 40 of the
# pass's 90 seconds.
RACE_PACKAGES := ./operator ./operator/release ./operator/task ./resolver ./gitsource ./drivers
RACE_TESTS := TestSync|TestAnExecStep|TestFSDescribesAFileWithoutReadingItsObject|TestFSReadsAFileFromItsCheckout|TestRenderCacheSharedByRendersAtOnce|TestALoadShare|TestRelease|TestConcurrentLockers|TestLockChanges|TestSandboxChildServes|TestSandboxReplaces|TestSandboxIdle|TestSandboxReads|TestTwoProcessesCheckingTheSameLoadAtOnce

# Tests run four at a time within a package (go test's default is one per
# core): an integration test spends most of its time waiting on its own
# control plane (a start, a rollout, an interval), so two cores carry more
# of them at once. Measured on 2 cores busy with other builds alike:
# ./operator took 16m53s at two and 10m46s at four, with 590 and 657 CPU-s.
TEST_PARALLEL ?= 4

test: testcluster ## Run all tests (integration tests start real control planes), then the concurrency tests under the race detector.
	$(GO) test -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) ./...
	$(GO) test -race -timeout $(TEST_TIMEOUT) -run '$(RACE_TESTS)' $(RACE_PACKAGES)

bench: testcluster ## Run the benchmarks (but the two 500-deployment ones: bench-agent, bench-controller).
	$(GO) test -run '^$$' -bench . -skip 'AgentThroughGit|DeploymentController|LockChain' -benchmem -timeout $(TEST_TIMEOUT) ./...

bench-ui: testcluster ## The web UI's figures: the overview at 500 deployments, the timeline of 1,000 lock commits (docs/ui.md).
	$(GO) test ./ui -run '^$$' -bench . -benchtime 20x -timeout $(TEST_TIMEOUT)

ui-screenshots: testcluster ## Load every page of the web UI in headless Chromium over the demo's state and write the screenshots into docs/images.
	STYRMIN_UI_SCREENSHOTS=$(CURDIR)/docs/images $(GO) test ./ui -run TestChromiumLoadsEveryPage -count=1 -v

bench-agent: testcluster ## The agent binary at 500 webapp deployments locked in one commit: create and fan-out until Ready (workloads rolled out and condition), API-server CPU, peak memory; 20 one-deployment changes by signed webhook push (p50, p99); then the same objects applied directly, as the same run's reference, and the ratios.
	$(GO) test ./e2e -run '^$$' -bench AgentThroughGit -benchtime 1x -agent-deployments 500 -agent-baseline -agent-changes 20 -v -timeout $(TEST_TIMEOUT)

# bench-scale runs four control planes one after the other, the largest
# with 2,000 deployments and their baseline: hours, not minutes, on 2 cores.
SCALE_SIZES   ?= 100,500,1000,2000
SCALE_PLOT    ?= $(CURDIR)/docs/images/agent-scale.svg
SCALE_TIMEOUT ?= 4h

bench-scale: testcluster ## bench-agent at 100, 500, 1,000 and 2,000 deployments (SCALE_SIZES=…), a control plane each, with the baseline and 20 webhook changes: the series as a markdown table in the log and the plot of cost per deployment in docs/images/agent-scale.svg (SCALE_PLOT=…).
	$(GO) test ./e2e -run '^$$' -bench AgentThroughGit -benchtime 1x -agent-sizes $(SCALE_SIZES) -agent-baseline -agent-changes 20 -agent-plot $(SCALE_PLOT) -v -timeout $(SCALE_TIMEOUT)

bench-agent-waves: testcluster ## bench-agent with the fan-out in 5 health-gated waves (styrmin.cue rollout: waves: 5): what the waves add.
	$(GO) test ./e2e -run '^$$' -bench AgentThroughGit -benchtime 1x -agent-deployments 500 -agent-waves 5 -v -timeout $(TEST_TIMEOUT)

bench-lock: ## Lock a 1,000-deployment cluster fan-out of 10 configuration commits (one lock commit each) against the head-only lock of the same repository.
	$(GO) test ./resolver -run '^$$' -bench LockChain -benchmem -benchtime 3x -timeout $(TEST_TIMEOUT)

bench-cli: ## The built styrminctl's plan, lock and lock --commit, whole processes, on a git checkout of a 1,000-deployment cluster fan-out (then on one whose deployment files all differ, then on the fleet locked with one deployment changed): ms (mean and fastest of 5), CPU seconds and peak memory per command (CLI_REFERENCE=path/to/another/styrminctl runs it too, then both in turn, run by run, for the median of the pairs' ratios).
	STYRMIN_CLI_REFERENCE=$(if $(CLI_REFERENCE),$(abspath $(CLI_REFERENCE))) $(GO) test ./e2e -run '^$$' -bench CLIFanOut1000 -benchtime 5x -timeout $(TEST_TIMEOUT)

bench-controller: testcluster ## The StyrminDeployment controller alone at 500 deployments, against applying the same objects directly.
	$(GO) test ./operator -run '^$$' -bench DeploymentController -benchtime 1x -deployments 500 -baseline -timeout $(TEST_TIMEOUT)

bench-limits: build ## Each hostile driver (internal/hostile) linted by the real styrminctl under test-sized limits, sandboxed then in-process (there under a 3 GB ulimit -v, so a memory bomb dies rather than exhausting the machine): exit code, time and peak memory (/usr/bin/time -v).
	@dir="$$(mktemp -d)"; $(GO) run ./hack/hostile "$$dir" >/dev/null; \
	for d in "$$dir"/drivers/*/1.0.0; do for mode in sandbox in-process; do \
		flag=""; [ $$mode = in-process ] && flag=--driver-in-process; \
		( [ $$mode = in-process ] && ulimit -v 3000000; /usr/bin/time -f "%e s %M KB exit %x" -o "$$dir/time" ./bin/styrminctl --repo "$$dir" $$flag drivers lint "$$d" >/dev/null 2>"$$dir/err" ); \
		printf '%-28s %-10s %-28s %.150s\n' "$$(basename $$(dirname $$d))" $$mode "$$(tail -1 $$dir/time)" "$$(head -c 150 $$dir/err | tr '\n' ' ')"; \
	done; done; rm -rf "$$dir"

lint: ## gofmt and go vet.
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt -l reports:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clusterctl:
	@$(GO) build -o $(CLUSTERCTL) ./hack/clusterctl

# REAL_NODE=1 adds the real node (a kubelet with containerd and runc from
# the machine's packages; needs root): see README.
REAL_NODE ?=

cluster-up: testcluster clusterctl ## Start the local control plane with fake nodes in the background (REAL_NODE=1: and a real node).
	@$(CLUSTERCTL) up $(if $(REAL_NODE),-real-node)

cluster-down: clusterctl ## Stop the local control plane, the demo's agent and every process they started.
	@if [ -f .cluster/agent.pid ]; then kill $$(cat .cluster/agent.pid) 2>/dev/null || true; rm -f .cluster/agent.pid; fi
	@$(CLUSTERCTL) down

cluster-status: clusterctl ## Tell whether the local control plane runs.
	@$(CLUSTERCTL) status

demo: build testcluster clusterctl ## The main job: the demo on a fresh local control plane (see README).
	hack/demo.sh
