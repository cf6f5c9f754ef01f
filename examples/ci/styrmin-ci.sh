#!/usr/bin/env bash
# Styrmin in any CI: the same steps as the GitHub Actions workflow, as a
# plain script.
#
#   styrmin-ci.sh plan    on a pull request: write the plan as markdown to
#                         $STYRMIN_PLAN_FILE (default styrmin-plan.md), or
#                         the errors when the plan fails, each failed
#                         deployment with its file and field, above what
#                         could be planned (then exit non-zero),
#                         with a footer (tool version, what was compared,
#                         how the change is applied: $STYRMIN_LOCK_MODE,
#                         commit-back or check); fail when the locks in the
#                         branch are stale (if STYRMIN_REQUIRE_LOCKS=1).
#   styrmin-ci.sh lock    after a merge: lock what changed, commit and push
#                         the lockfiles back with compare-and-swap retries.
#   styrmin-ci.sh check   after a merge, for teams that lock in the pull
#                         request instead: fail when locks are stale.
#
# Environment: STYRMINCTL (default: styrminctl on PATH), STYRMIN_REPO (the
# desired-state checkout, default .), STYRMIN_BASE (plan base ref, default:
# $STYRMIN_REMOTE/ the target branch the CI names for a pull or merge
# request, else the upstream merge base; a detached HEAD, as CI checks pull
# requests out, has no upstream, so there one of them is needed),
# STYRMIN_REMOTE (default origin), STYRMIN_BRANCH, and STYRMIN_GIT_TOKEN /
# STYRMIN_GIT_SSH_KEY_FILE for pushing.
set -euo pipefail

styrminctl=${STYRMINCTL:-styrminctl}
repo=${STYRMIN_REPO:-.}
cmd=${1:-}

# footer describes what the plan compared and how it will be applied, under
# the plan or its error in the pull request's comment.
footer() {
	local ver base head how
	ver=$("$styrminctl" version --client 2>/dev/null | sed -n 's/^client: \([^ ]*\).*/\1/p')
	head=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
	if [ -n "${STYRMIN_BASE:-}" ]; then
		base="\`$(git -C "$repo" rev-parse --short "$STYRMIN_BASE" 2>/dev/null || echo unknown)\` ($STYRMIN_BASE)"
	else
		base="the upstream merge base"
	fi
	case "${STYRMIN_LOCK_MODE:-commit-back}" in
	check) how="lockfiles are committed in the pull request (\`styrminctl lock --commit\`); on merge CI checks they are current, then each cluster's agent applies them in sequence order" ;;
	*) how="on merge, CI locks what changed and pushes the lockfiles; then each cluster's agent applies them in sequence order" ;;
	esac
	printf '\n---\n<sub>styrminctl %s · compared %s with head `%s` · %s</sub>\n' "${ver:-unknown}" "$base" "$head" "$how"
}

# target_branch is the branch the pull or merge request merges into, as the
# CI names it (GitHub Actions, GitLab, Jenkins, Bitbucket, Azure Pipelines);
# empty outside one.
target_branch() {
	local t=${GITHUB_BASE_REF:-${CI_MERGE_REQUEST_TARGET_BRANCH_NAME:-${CHANGE_TARGET:-${BITBUCKET_PR_DESTINATION_BRANCH:-${SYSTEM_PULLREQUEST_TARGETBRANCH:-}}}}}
	echo "${t#refs/heads/}"
}

# detached tells whether the checkout's HEAD is a commit on no branch: with
# no upstream to merge with, styrminctl would compare the head with its own
# lockfiles, and a pull request that commits its locks would read "no
# changes".
detached() {
	git -C "$repo" rev-parse -q --verify HEAD >/dev/null 2>&1 && ! git -C "$repo" symbolic-ref -q HEAD >/dev/null 2>&1
}

case "$cmd" in
plan)
	out=${STYRMIN_PLAN_FILE:-styrmin-plan.md}
	if [ -z "${STYRMIN_BASE:-}" ] && [ -n "$(target_branch)" ]; then
		STYRMIN_BASE=${STYRMIN_REMOTE:-origin}/$(target_branch)
	fi
	base_args=()
	if [ -n "${STYRMIN_BASE:-}" ]; then
		base_args=(--base "$STYRMIN_BASE")
	fi
	body=$(mktemp)
	errs=$(mktemp)
	trap 'rm -f "$body" "$errs"' EXIT
	set +e
	if [ -z "${STYRMIN_BASE:-}" ] && detached; then
		echo "error: HEAD is detached (a CI checkout of a pull request) and no base was named, so the plan would compare the head with its own lockfiles: set STYRMIN_BASE to the branch it merges into (for example origin/main)" >"$errs"
		rc=1
	else
		"$styrminctl" --repo "$repo" plan "${base_args[@]}" -o markdown --detailed-exitcode >"$body" 2>"$errs"
		rc=$?
	fi
	set -e
	# 2 is "the plan has changes" only with a plan: a Go program that
	# crashes (a panic, out of memory) exits 2 as well.
	if [ "$rc" = 2 ] && { ! head -n 1 "$body" | grep -q '^### Styrmin plan' || grep -qE '^(panic|fatal error):' "$errs"; }; then
		rc=1
	fi
	# The comment is written whatever happened: a failed plan says why, so
	# the pull request shows the error instead of an old plan.
	{
		case $rc in
		0 | 2) cat "$body" ;;
		*)
			printf '### Styrmin plan failed\n\nThe plan failed (exit %s):\n\n```\n' "$rc"
			cat "$errs"
			printf '```\n'
			# What could be planned, with its list of errors: the
			# deployments that resolved are reviewed in the same round.
			if [ -s "$body" ]; then
				printf '\n'
				cat "$body"
			fi
			;;
		esac
		footer
	} >"$out"
	case $rc in
	0) echo "styrmin: no changes" ;;
	2) echo "styrmin: plan has changes, written to $out" ;;
	*) echo "styrmin: plan failed, the error written to $out" >&2; cat "$errs" >&2; exit "$rc" ;;
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
