#!/usr/bin/env bash
# The Styrmin demo (`make demo`): a desired-state repository made from
# examples/, the agent running against the local control plane, and the
# story of a platform team's day: deploy two environments, fan out an
# environment value, upgrade the multi-component application (its
# migration job runs between stopping and starting the workers), upgrade it
# to its 1.5 line on the real node (driver 2.0.0 execs into the server;
# skipped, saying why, where the machine cannot run the real node) and
# watch a drift being corrected. `make demo` has already built the binaries and
# started the control plane; the cluster keeps running until
# `make cluster-down`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export KUBECONFIG="$root/.cluster/kubeconfig"
bin="$root/bin"
kubectl="$root/.bin/testcluster/kubectl"
demo="$root/.demo"
repo="$demo/repo"

if [ -t 1 ]; then bold=$'\033[1m'; dim=$'\033[2m'; off=$'\033[0m'; else bold= dim= off=; fi
step() { printf '\n%s==> %s%s\n' "$bold" "$*" "$off"; }
say() { printf '%s\n' "$*"; }
run() { printf '%s$ %s%s\n' "$dim" "${*/#$bin\//}" "$off"; "$@"; }
git_() { git -C "$repo" -c user.name="Demo Platform Team" -c user.email=platform@example.com "$@"; }
styrminctl() { run "$bin/styrminctl" "$@"; }

# wait_for DESCRIPTION TIMEOUT_SECONDS COMMAND...: poll until COMMAND succeeds.
wait_for() {
	local what=$1 timeout=$2 start=$SECONDS
	shift 2
	printf '   waiting for %s ' "$what"
	until "$@" >/dev/null 2>&1; do
		if [ -f "$root/.cluster/agent.pid" ] && ! kill -0 "$(cat "$root/.cluster/agent.pid")" 2>/dev/null; then
			printf 'the agent stopped; the end of its log:\n'
			tail -5 "$demo/agent.log"
			return 1
		fi
		if ((SECONDS - start > timeout)); then
			printf 'timed out after %ss\n' "$timeout"
			say "   The agent's log: $demo/agent.log"
			return 1
		fi
		printf '.'
		sleep 1
	done
	printf ' done in %ss\n' "$((SECONDS - start))"
}

# ready_at NAMESPACE SEQUENCE: the StyrminDeployment runs that sequence and is Ready.
ready_at() {
	local out
	out=$("$kubectl" -n "$1" get styrmindeployment "$1" -o jsonpath='{.status.activeSequence} {.status.conditions[?(@.type=="Ready")].status}') || return 1
	[ "$out" = "$2 True" ]
}

all_ready() {
	ready_at dev-web "$1" && ready_at dev-hub "$2" && ready_at staging-web "$3" && ready_at staging-hub "$4"
}

# hub_on_real_node: every pod of dev-hub runs on the real node and is Ready.
hub_on_real_node() {
	local nodes n
	nodes=$("$kubectl" -n dev-hub get pods -o jsonpath='{range .items[*]}{.spec.nodeName} {end}') || return 1
	[ -n "$nodes" ] || return 1
	for n in $nodes; do
		[ "$n" = testcluster-real-node ] || return 1
	done
	"$kubectl" -n dev-hub wait --for=condition=Ready pods --all --timeout=5s
}

stop_agent() {
	if [ -f "$root/.cluster/agent.pid" ]; then
		kill "$(cat "$root/.cluster/agent.pid")" 2>/dev/null || true
		rm -f "$root/.cluster/agent.pid"
	fi
}

step "0/9 A fresh local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok fake nodes, a real node)"
stop_agent
"$root/.bin/clusterctl" down >/dev/null
# The real node (a kubelet with containerd) runs real processes: driver
# 2.0.0's exec steps need one (step 7).
if real_node_reason=$("$root/.bin/clusterctl" real-node-check 2>&1); then
	real_node=true
	"$root/.bin/clusterctl" up -real-node
else
	real_node=false
	say "   No real node: ${real_node_reason#clusterctl: }"
	"$root/.bin/clusterctl" up
fi
run "$kubectl" get nodes

step "1/9 A desired-state repository, made from examples/"
rm -rf "$demo"
mkdir -p "$repo"
cp -R examples/styrmin.cue examples/clusters examples/drivers "$repo/"
git_ init -q -b main
git_ add -A
git_ commit -q -m "Desired state: cluster local, environments dev and staging"
say "   $repo: cluster local; environments dev and staging; deployments web (driver webapp) and hub (driver graphhub) in each."
styrminctl --repo "$repo" drivers list

step "2/9 Review the plan, then lock: one lockfile per deployment, sequence 1"
printf '%s$ styrminctl --repo %s plan | head -14%s\n' "$dim" "$repo" "$off"
"$bin/styrminctl" --repo "$repo" plan >"$demo/plan.txt"
head -14 "$demo/plan.txt"
say "   (the full plan, in $demo/plan.txt, goes on with every value, action and manifest of each deployment)"
styrminctl --repo "$repo" lock --commit

step "3/9 Start the agent for cluster local (it follows the repository's lock commits)"
# The agent keeps its sync position (a StyrminSource) in its own namespace.
"$kubectl" create namespace styrmin-system --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
for ns in dev-hub staging-hub; do
	"$kubectl" create namespace "$ns" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
	# The driver takes the database password as a reference to this Secret; the value never enters git.
	"$kubectl" -n "$ns" create secret generic hub-db --from-literal=password="demo-$RANDOM$RANDOM" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
done
ui_address=127.0.0.1:18090
printf '%s$ styrmin-agent --cluster local --repo %s --branch main --poll-interval 2s --drift-interval 10s --install-crds --ui-bind-address %s &%s\n' "$dim" "$repo" "$ui_address" "$off"
setsid "$bin/styrmin-agent" --cluster local --repo "$repo" --branch main --poll-interval 2s --drift-interval 10s \
	--install-crds --metrics-bind-address 127.0.0.1:18080 --health-probe-bind-address 127.0.0.1:18081 --ui-bind-address "$ui_address" \
	--kubeconfig "$KUBECONFIG" >"$demo/agent.log" 2>&1 </dev/null &
echo $! >"$root/.cluster/agent.pid"
say "   agent pid $(cat "$root/.cluster/agent.pid"), log $demo/agent.log"
wait_for "four deployments Ready at sequence 1" 240 all_ready 1 1 1 1
styrminctl status

step "4/9 Change an environment value: dev logs at info (fan-out)"
sed -i 's/parameters: logLevel: "debug"/parameters: logLevel: "info"/' "$repo/clusters/local/environments/dev/environment.cue"
git_ commit -q -am "dev: log at info level"
say "   The plan shows who inherits the value: dev/hub redeploys; dev/web's driver has no logLevel, so it does not."
styrminctl --repo "$repo" plan --base HEAD~1
styrminctl --repo "$repo" lock --commit
wait_for "dev/hub Ready at sequence 2" 120 ready_at dev-hub 2
styrminctl tasks list

step "5/9 Upgrade graphhub in dev: app 1.4.0 → 1.4.1 (driver graphhub 1.0.0's upgrade hook)"
sed -i 's/appVersion: "1.4.0"/appVersion: "1.4.1"/' "$repo/clusters/local/environments/dev/deployments/hub.cue"
git_ commit -q -am "dev/hub: graphhub 1.4.1"
styrminctl --repo "$repo" plan --base HEAD~1
styrminctl --repo "$repo" lock --commit
wait_for "dev/hub Ready at sequence 3" 240 ready_at dev-hub 3
say "   The upgrade task's steps, in the order they ran (workers stopped, migration job, upgrade, workers started):"
styrminctl tasks get -n dev-hub hub-3
run "$kubectl" -n dev-hub get jobs

step "6/9 Environments as units: back up dev, clone it to preview with its data, restore dev/hub"
say "   dev's backups go to s3://backups/local/dev with the credentials of the Secret its environment.cue names;"
say "   the agent hands a Secret to a driver's job only when it is labelled styrmin.io/backup-credentials=true."
"$kubectl" -n styrmin-system create secret generic backup-credentials --from-literal=AWS_ACCESS_KEY_ID=demo \
	--from-literal=AWS_SECRET_ACCESS_KEY="demo-$RANDOM$RANDOM" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
"$kubectl" -n styrmin-system label --overwrite secret backup-credentials styrmin.io/backup-credentials=true >/dev/null
say "   A backup runs each driver's backup hook as a task of its deployment (graphhub: a pg_dump job); webapp has no hook: skipped."
styrminctl backup create local/dev --name dev-demo --wait
styrminctl backup list
say "   A clone copies dev's configuration into preview: its own namespaces and backup location, connects inside preview,"
say "   and, with --from-backup, each deployment restores dev's backup in its setup hook before its application starts."
"$kubectl" create namespace preview-hub --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
"$kubectl" -n preview-hub create secret generic hub-db --from-literal=password="demo-$RANDOM$RANDOM" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
styrminctl --repo "$repo" env clone local/dev preview --from-backup latest --commit
styrminctl --repo "$repo" lock --commit
wait_for "preview/hub and preview/web Ready at sequence 1" 240 sh -c "$(declare -f ready_at); kubectl='$kubectl'; ready_at preview-hub 1 && ready_at preview-web 1"
say "   preview/hub's create: the restore hook's steps run after the database is ready and before init:"
styrminctl tasks get -n preview-hub hub-1
say "   A restore of dev/hub from the backup: while it runs, dev/hub's other changes wait (a fan-out included)."
styrminctl restore local/dev --from dev-demo --deployment hub --name dev-demo-restore --wait
run "$kubectl" get styrminbackups,styrminrestores -n styrmin-system

step "7/9 Upgrade graphhub in dev to the 1.5 line: driver 2.0.0, whose hook execs into the server, on the real node"
if [ "$real_node" = true ]; then
	say "   dev-hub's pods move to the real node: the namespace's annotations give every new pod its node selector and"
	say "   toleration (admission plugins PodNodeSelector, PodTolerationRestriction); its images were made on this machine."
	run "$kubectl" annotate --overwrite namespace dev-hub \
		"scheduler.alpha.kubernetes.io/node-selector=styrmin.io/real-node=true" \
		'scheduler.alpha.kubernetes.io/defaultTolerations=[{"key":"styrmin.io/real-node","operator":"Equal","value":"true","effect":"NoSchedule"}]'
	run "$kubectl" -n dev-hub delete pods --all --wait=false
	wait_for "dev/hub's pods Ready on the real node" 180 hub_on_real_node
	run "$kubectl" -n dev-hub get pods -o wide
	sed -i 's/appVersion: "1.4.1"/appVersion: "1.5.0"/' "$repo/clusters/local/environments/dev/deployments/hub.cue"
	git_ commit -q -am "dev/hub: graphhub 1.5.0"
	say "   1.5.0 is outside driver 1.0.0's range: the plan takes driver 2.0.0, whose upgrade hook turns maintenance mode on (exec),"
	say "   stops the workers, migrates, upgrades, starts the workers and turns maintenance mode off (exec)."
	printf '%s$ styrminctl --repo %s plan --base HEAD~1 | head -24%s\n' "$dim" "$repo" "$off"
	"$bin/styrminctl" --repo "$repo" plan --base HEAD~1 >"$demo/plan-1.5.txt"
	head -24 "$demo/plan-1.5.txt"
	say "   (the whole plan: $demo/plan-1.5.txt)"
	styrminctl --repo "$repo" lock --commit
	wait_for "dev/hub Ready at sequence 4" 240 ready_at dev-hub 4
	say "   The upgrade task: each exec step's output is the command's, run in the server's container on the real node:"
	styrminctl tasks get -n dev-hub hub-4
	run "$kubectl" -n dev-hub get pods -o wide
else
	say "   Skipped: this machine cannot run the real node (${real_node_reason#clusterctl: })."
	say "   Driver 2.0.0's hook execs into the server, and pods on the fake nodes run no process."
fi

step "8/9 Drift: scale dev/web by hand; the agent puts it back"
run "$kubectl" -n dev-web scale deployment web --replicas=5
wait_for "dev/web back at its 2 replicas" 60 sh -c "[ \"\$('$kubectl' -n dev-web get deployment web -o jsonpath='{.spec.replicas}')\" = 2 ]"
run "$kubectl" -n dev-web get events --field-selector reason=DriftCorrected

step "9/9 Where to look"
cat <<MSG
   export KUBECONFIG=$KUBECONFIG
   $bin/styrminctl status                      # every deployment, its sequence and readiness
   $bin/styrminctl tasks list                  # every task: workflow, sequence, phase
   $bin/styrminctl history local/dev/hub       # the instance timeline of one deployment
   $bin/styrminctl history local/dev/hub --from-git --repo $repo   # every lock commit, from git
   $bin/styrminctl ui --repo $repo             # the web UI for every kubeconfig context, on 127.0.0.1:8090
   $kubectl get styrmindeployments -A
   $kubectl get styrmintasks -A
   $bin/styrminctl backup list                 # the backups, and: backup get NAME, restore CLUSTER/ENV --from NAME
   git -C $repo log --format='%h %s%n%b'        # lock commits with their Styrmin-Lock trailers
   Agent log: $demo/agent.log
   The agent and the control plane keep running; stop both with: make cluster-down
MSG
printf '\n%sThe web UI (served by the agent, read-only): http://%s/%s\n' "$bold" "$ui_address" "$off"
