#!/usr/bin/env bash
# Styrmin in any CI: the same steps as the GitHub Actions workflow, as a
# plain script.
#
#   styrmin-ci.sh plan    on a pull request: write the plan as markdown to
#                         $STYRMIN_PLAN_FILE (default styrmin-plan.md) and
#                         fail when the locks in the branch are stale
#                         (if STYRMIN_REQUIRE_LOCKS=1).
#   styrmin-ci.sh lock    after a merge: lock what changed, commit and push
#                         the lockfiles back with compare-and-swap retries.
#   styrmin-ci.sh check   after a merge, for teams that lock in the pull
#                         request instead: fail when locks are stale.
#
# Environment: STYRMINCTL (default: styrminctl on PATH), STYRMIN_REPO (the
# desired-state checkout, default .), STYRMIN_BASE (plan base ref, default:
# the upstream merge base), STYRMIN_REMOTE (default origin), STYRMIN_BRANCH,
# and STYRMIN_GIT_TOKEN / STYRMIN_GIT_SSH_KEY_FILE for pushing.
set -euo pipefail

styrminctl=${STYRMINCTL:-styrminctl}
repo=${STYRMIN_REPO:-.}
cmd=${1:-}

case "$cmd" in
plan)
	out=${STYRMIN_PLAN_FILE:-styrmin-plan.md}
	base_args=()
	if [ -n "${STYRMIN_BASE:-}" ]; then
		base_args=(--base "$STYRMIN_BASE")
	fi
	set +e
	"$styrminctl" --repo "$repo" plan "${base_args[@]}" -o markdown --detailed-exitcode >"$out"
	rc=$?
	set -e
	case $rc in
	0) echo "styrmin: no changes" ;;
	2) echo "styrmin: plan has changes, written to $out" ;;
	*) echo "styrmin: plan failed" >&2; cat "$out" >&2; exit "$rc" ;;
	esac
	if [ "${STYRMIN_REQUIRE_LOCKS:-0}" = 1 ]; then
		"$styrminctl" --repo "$repo" lock --check
	fi
	;;
lock)
	args=(--push --remote "${STYRMIN_REMOTE:-origin}")
	if [ -n "${STYRMIN_BRANCH:-}" ]; then
		args+=(--branch "$STYRMIN_BRANCH")
	fi
	"$styrminctl" --repo "$repo" lock "${args[@]}"
	;;
check)
	"$styrminctl" --repo "$repo" lock --check
	;;
*)
	echo "usage: $0 plan|lock|check" >&2
	exit 64
	;;
esac
