package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/atomicfile"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/resolver"
)

// latestBackupFunc finds the ID of the newest backup of an environment:
// only the cluster knows which backups exist, so the command is given
// the lookup rather than doing it.
type latestBackupFunc func(ctx context.Context, cluster, env string) (id string, err error)

// clusterLatestBackup is the lookup of the real command: the newest
// StyrminBackup of the environment that succeeded, in the agent's
// namespace of the cluster kubectl's flags name.
func clusterLatestBackup(k *kubeOptions) latestBackupFunc {
	return func(ctx context.Context, cluster, env string) (string, error) {
		c, err := k.client()
		if err != nil {
			return "", fmt.Errorf("--from-backup latest asks the cluster: %w", err)
		}
		b, err := operation.LatestBackup(ctx, c, k.namespace, cluster, env)
		if err != nil {
			return "", fmt.Errorf("--from-backup latest: %w", err)
		}
		return b.Name, nil
	}
}

// envAttempts bounds the compare-and-swap attempts of env … --commit.
const envAttempts = 8

type envCloneOptions struct {
	cluster, fromBackup, namespacePrefix string
	commit                               bool
	ident                                identityFlags
}

type envDeleteOptions struct {
	commit bool
	ident  identityFlags
}

// newEnvCmd builds `styrminctl env`: environments as units, edited in
// the working tree (or committed) like upgrade's edits; the next lock
// turns them into instances or tombstones.
func newEnvCmd(g *globalOptions, load restConfigFunc, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Clone or delete a whole environment",
		Example: `  styrminctl env clone local/dev preview
  styrminctl env delete local/preview --commit`,
	}
	co := &envCloneOptions{}
	kube := newKubeOptions(load)
	latestBackup := clusterLatestBackup(kube)
	clone := &cobra.Command{
		Use:         "clone CLUSTER/SRC DST",
		Annotations: map[string]string{readsRepo: "true"},
		Short:       "Copy an environment's configuration into a new environment",
		Example: `  styrminctl env clone local/dev preview
  styrminctl env clone local/prod incident-42 --from-backup nightly-2026-12-01 --commit
  styrminctl env clone local/dev dev --cluster other --namespace-prefix dev2`,
		Long: `clone writes clusters/<cluster>/environments/DST as a copy of SRC's folder: the
deployment files byte for byte, the environment file with namespacePrefix set (default
DST; no deployment of the target cluster may already have one of the new namespaces),
backupLocation derived for DST (same bucket or claim, DST in place of SRC as the last
path element, or appended), backups.schedule and keep left out (a clone takes no
scheduled backups), and clonedFrom recording the source and the commit copied (the
working tree's configuration must be committed). With --from-backup the clone's
deployments restore that backup of SRC in their setup hook (SRC needs an s3://
backupLocation; "latest" asks the cluster for the newest). The cloned deployments
connect only to each other. Nothing is written when a check fails.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cluster, src, ok := strings.Cut(args[0], "/")
			if !ok || cluster == "" || src == "" || strings.Contains(src, "/") {
				return usageError{fmt.Errorf("env clone %q: expected CLUSTER/ENVIRONMENT", args[0])}
			}
			req := resolver.CloneRequest{Cluster: cluster, Source: src, Target: args[1], TargetCluster: co.cluster, FromBackup: co.fromBackup, NamespacePrefix: co.namespacePrefix}
			if req.FromBackup == resolver.LatestBackup {
				id, err := latestBackup(cmd.Context(), cluster, src)
				if err != nil {
					return fmt.Errorf("env clone %s: %w", args[0], err)
				}
				req.FromBackup = id
			}
			if co.commit {
				return runEnvCommit(cmd.Context(), g, &co.ident, stdout, func(ctx context.Context, r *envCommitter) (resolver.EnvironmentCommit, error) {
					return resolver.CommitClone(ctx, r.repo, r.opts, req, r.co)
				})
			}
			ws, _, err := headWorkspace(cmd.Context(), g)
			if err != nil {
				return err
			}
			plan, err := ws.PlanClone(req)
			if err != nil {
				return err
			}
			if err := writeFiles(g.Repo, plan.Files()); err != nil {
				return fmt.Errorf("env clone: %w", err)
			}
			printClone(stdout, plan)
			fmt.Fprintln(stdout, "run `styrminctl lock` to lock it (or commit the folder and let CI lock it)")
			return nil
		},
	}
	kube.register(clone, agentNamespace, "styrmin-system")
	f := clone.Flags()
	f.StringVar(&co.cluster, "cluster", "", "clone into this cluster (default: the source's)")
	f.StringVar(&co.fromBackup, "from-backup", "", "restore this backup ID of the source (or \"latest\") in the clone's setup")
	f.StringVar(&co.namespacePrefix, "namespace-prefix", "", "namespace prefix of the clone (default: its name)")
	f.BoolVar(&co.commit, "commit", false, "commit the new folder in one commit")
	co.ident.register(clone, os.Getenv)

	do := &envDeleteOptions{}
	del := &cobra.Command{
		Use:         "delete CLUSTER/ENV",
		Annotations: map[string]string{readsRepo: "true"},
		Short:       "Remove an environment's folder; the next lock deletes its deployments",
		Example: `  styrminctl env delete local/preview
  styrminctl env delete local/preview --commit`,
		Long: `delete removes clusters/<cluster>/environments/ENV. The next lock tombstones its
deployments, and the deletion threshold applies: more deployments than it needs
styrminctl lock --allow-deletions N (the command says N).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cluster, env, ok := strings.Cut(args[0], "/")
			if !ok || cluster == "" || env == "" || strings.Contains(env, "/") {
				return usageError{fmt.Errorf("env delete %q: expected CLUSTER/ENVIRONMENT", args[0])}
			}
			req := resolver.EnvironmentDeleteRequest{Cluster: cluster, Environment: env}
			if do.commit {
				return runEnvCommit(cmd.Context(), g, &do.ident, stdout, func(ctx context.Context, r *envCommitter) (resolver.EnvironmentCommit, error) {
					return resolver.CommitEnvironmentDelete(ctx, r.repo, r.opts, req, r.co)
				})
			}
			ws, _, err := headWorkspace(cmd.Context(), g)
			if err != nil {
				return err
			}
			plan, err := ws.PlanEnvironmentDelete(req)
			if err != nil {
				return err
			}
			if err := os.RemoveAll(filepath.Join(g.Repo, filepath.FromSlash(plan.Dir))); err != nil {
				return fmt.Errorf("env delete: %w", err)
			}
			printEnvironmentDelete(stdout, plan)
			return nil
		},
	}
	do.ident.register(del, os.Getenv)
	del.Flags().BoolVar(&do.commit, "commit", false, "commit the removal in one commit")
	cmd.AddCommand(clone, del)
	return cmd
}

// envCommitter is what an edit of the working tree's branch (upgrade,
// env … --commit) commits with.
type envCommitter struct {
	repo *gitsource.Repo
	opts resolver.WorkspaceOptions
	co   resolver.CommitOptions
}

// newCommitter opens the --repo repository for a commit on its current
// branch, with the identity flags and up to attempts compare-and-swap
// attempts.
func newCommitter(ctx context.Context, g *globalOptions, ident *identityFlags, attempts int) (*envCommitter, error) {
	repo, err := openForCommit(g.Repo, "", "", false)
	if err != nil {
		return nil, err
	}
	dir, err := repo.Subdir(g.Repo)
	if err != nil {
		return nil, err
	}
	co, err := ident.commitOptions(repo, resolver.CommitOptions{Attempts: attempts, Dir: dir})
	if err != nil {
		return nil, err
	}
	return &envCommitter{repo: repo, opts: g.workspaceOptions(ctx, desiredStateRemote(g.Repo)), co: co}, nil
}

// runEnvCommit commits an environment edit on the current branch, as
// upgrade --commit does.
func runEnvCommit(ctx context.Context, g *globalOptions, ident *identityFlags, stdout io.Writer, commit func(context.Context, *envCommitter) (resolver.EnvironmentCommit, error)) error {
	c, err := newCommitter(ctx, g, ident, envAttempts)
	if err != nil {
		return err
	}
	out, err := commit(ctx, c)
	if err != nil {
		return err
	}
	subject := ""
	switch {
	case out.Clone != nil:
		printClone(stdout, out.Clone)
		subject = out.Clone.Subject()
	case out.Delete != nil:
		printEnvironmentDelete(stdout, out.Delete)
		subject = out.Delete.Subject()
	}
	if out.Committed {
		fmt.Fprintf(stdout, "committed %s on %s: %s\n", out.Commit, c.repo.Branch(), subject)
	}
	return nil
}

// writeFiles writes new files under the repository root, each through a
// rename.
func writeFiles(root string, files map[string][]byte) error {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	w := atomicfile.New(resolver.LockTempPrefix)
	defer func() { _ = w.Close() }()
	for _, p := range paths {
		if err := w.Write(filepath.Join(root, filepath.FromSlash(p)), files[p]); err != nil {
			return err
		}
	}
	return nil
}

func printClone(stdout io.Writer, p *resolver.ClonePlan) {
	var names []string
	for _, id := range p.Deployments {
		names = append(names, id.Name)
	}
	fmt.Fprintf(stdout, "wrote %s: %d deployments (%s), a clone of %s/%s at %s\n", p.Dir, len(names), strings.Join(names, ", "), p.ClonedFrom.Cluster, p.ClonedFrom.Environment, p.ClonedFrom.Commit)
	if p.ClonedFrom.Backup != "" {
		fmt.Fprintf(stdout, "its deployments restore backup %s from %s when they are set up\n", p.ClonedFrom.Backup, p.ClonedFrom.Location)
	}
	if p.BackupLocation != "" {
		fmt.Fprintf(stdout, "its backups go to %s\n", p.BackupLocation)
	}
	if p.DroppedSchedule {
		fmt.Fprintln(stdout, "backups.schedule and keep were not copied: a clone takes no scheduled backups (set them in its environment file if it should)")
	}
}

func printEnvironmentDelete(stdout io.Writer, p *resolver.EnvironmentDeletePlan) {
	var names []string
	for _, id := range p.Deployments {
		names = append(names, id.Name)
	}
	fmt.Fprintf(stdout, "removed %s (deployments: %s)\n", p.Dir, strings.Join(names, ", "))
	switch {
	case p.Deletions.Refused:
		fmt.Fprintf(stdout, "the next lock deletes %d deployments, more than the deletion threshold of %d: run `styrminctl lock --allow-deletions %d`\n", p.Deletions.Count, p.Deletions.Threshold, p.Deletions.Count)
	case p.Deletions.Count > 0:
		fmt.Fprintln(stdout, "run `styrminctl lock` to delete its deployments")
	}
}
