package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/atomicfile"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/resolver"
)

// backupRecordFunc reads the StyrminBackup id ("latest": the newest of
// the whole environment env of cluster that succeeded): only the cluster
// knows which backups exist and what each holds, so the command is given
// the lookup rather than doing it. Its errors name --from-backup.
type backupRecordFunc func(ctx context.Context, cluster, env, id string) (*v1alpha1.StyrminBackup, error)

// clusterBackupRecord is the lookup of the real command, in the agent's
// namespace of the cluster kubectl's flags name.
func clusterBackupRecord(k *kubeOptions) backupRecordFunc {
	return func(ctx context.Context, cluster, env, id string) (*v1alpha1.StyrminBackup, error) {
		c, err := k.client()
		if err != nil {
			return nil, fmt.Errorf("--from-backup %s asks the cluster: %w", id, err)
		}
		if id == resolver.LatestBackup {
			b, err := operation.LatestBackup(ctx, c, k.namespace, cluster, env)
			if err != nil {
				return nil, fmt.Errorf("--from-backup latest: %w", err)
			}
			return b, nil
		}
		var b v1alpha1.StyrminBackup
		if err := c.Get(ctx, client.ObjectKey{Namespace: k.namespace, Name: id}, &b); err != nil {
			return nil, fmt.Errorf("--from-backup %s: reading StyrminBackup %s/%s: %w", id, k.namespace, id, err)
		}
		return &b, nil
	}
}

// checkBackupID checks --from-backup as the resolver checks the ID it
// records (resolver.Workspace.PlanClone; its check is not exported): "latest",
// or a backup's name, a DNS-1123 label.
func checkBackupID(id string) error {
	if id == resolver.LatestBackup || len(validation.IsDNS1123Label(id)) == 0 {
		return nil
	}
	return fmt.Errorf("--from-backup %q: expected a backup ID (a DNS-1123 label) or %q (omit the flag to clone without a backup)", id, resolver.LatestBackup)
}

// recordTimeout bounds the read of an explicit backup's record: the
// clone can do without it (the agent checks each create against the
// record), so a cluster that does not answer delays the clone only this
// long.
const recordTimeout = 10 * time.Second

// cloneBackup completes req's backup from its record: the ID "latest"
// names, and what each deployment's part came to (req.BackupHolds). A
// record is needed for "latest"; for an ID one not read, or of another
// environment (the cluster kubectl's flags name may not be the source's),
// leaves BackupHolds unknown, and the note returned says so.
func cloneBackup(ctx context.Context, record backupRecordFunc, req *resolver.CloneRequest) (note string, err error) {
	id := req.FromBackup
	if id == resolver.LatestBackup {
		b, err := record(ctx, req.Cluster, req.Source, id)
		if err != nil {
			return "", err
		}
		req.FromBackup, req.BackupHolds = b.Name, backupHolds(b)
		return "", nil
	}
	rctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	type read struct {
		b   *v1alpha1.StyrminBackup
		err error
	}
	// The client's discovery of the API does not heed the context: the
	// read is given up rather than waited for.
	rc := make(chan read, 1)
	go func() {
		b, err := record(rctx, req.Cluster, req.Source, id)
		rc <- read{b, err}
	}()
	var r read
	select {
	case r = <-rc:
	case <-rctx.Done():
		r.err = fmt.Errorf("--from-backup %s: the cluster did not answer within %s", id, recordTimeout)
	}
	b := r.b
	unknown := "every deployment is listed to restore it, and each create checks its part where the agent holds the record"
	switch {
	case ctx.Err() != nil:
		return "", ctx.Err()
	case r.err != nil:
		return fmt.Sprintf("note: %v; %s", r.err, unknown), nil
	case b.Spec.Environment != req.Source || (b.Spec.Cluster != "" && b.Spec.Cluster != req.Cluster):
		return fmt.Sprintf("note: StyrminBackup %s of this cluster is a backup of %s/%s, not of %s/%s; %s",
			id, cmp.Or(b.Spec.Cluster, "(the agent's cluster)"), b.Spec.Environment, req.Cluster, req.Source, unknown), nil
	case !b.Status.Phase.Terminal():
		return "", fmt.Errorf("--from-backup %s: the backup has not finished (%s): clone from it once it has (styrminctl backup list %s/%s)",
			id, cmp.Or(string(b.Status.Phase), "not started"), req.Cluster, req.Source)
	}
	req.BackupHolds = backupHolds(b)
	return "", nil
}

// backupHolds is what backup b's record says of each deployment's part:
// true when it succeeded (resolver.CloneRequest.BackupHolds).
func backupHolds(b *v1alpha1.StyrminBackup) map[string]bool {
	holds := make(map[string]bool, len(b.Status.Deployments))
	for _, p := range b.Status.Deployments {
		holds[p.Name] = p.Phase == v1alpha1.OperationSucceeded
	}
	return holds
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
	backupRecord := clusterBackupRecord(kube)
	clone := &cobra.Command{
		Use:         "clone CLUSTER/SRC DST",
		Annotations: map[string]string{readsRepo: "true", readsCommitWith: "commit"},
		Short:       "Copy an environment's configuration into a new environment",
		Example: `  styrminctl env clone local/dev preview
  styrminctl env clone local/prod incident-42 --from-backup nightly-2026-12-01 --commit
  styrminctl env clone local/dev dev --cluster other --namespace-prefix dev2`,
		Long: `clone writes clusters/<cluster>/environments/DST as a copy of SRC's folder: the
deployment files byte for byte, the environment file with namespacePrefix set (default
DST; no deployment of the target cluster may already have one of the new namespaces),
backupLocation derived for DST (same bucket or claim, DST in place of SRC as the last
path element, or appended; into another cluster, that cluster in place of SRC's in the
element before; a location an environment uses already is not taken: the last element
is then <cluster>-DST, and when that is used too the clone is refused), backups.schedule
and keep left out (a clone takes no scheduled backups), and clonedFrom recording the
source and the commit copied (the working tree's configuration must be committed).
With --from-backup the clone's deployments restore that backup of SRC in their setup
hook (SRC needs an s3:// backupLocation; "latest" asks the cluster for the newest
backup of the whole environment that succeeded). The backup's record in the cluster
(for an ID, read when the cluster answers) decides which restore it: a deployment
whose part did not succeed is refused, one the backup has no part of starts empty
(the command names them). The cloned deployments connect only to each other. Nothing
is written when a check fails.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cluster, src, ok := strings.Cut(args[0], "/")
			if !ok || cluster == "" || src == "" || strings.Contains(src, "/") {
				return usageError{fmt.Errorf("env clone %q: expected CLUSTER/ENVIRONMENT", args[0])}
			}
			// The backup ID is checked before the cluster is asked for its
			// record, so that a mistyped one contacts nothing and changes
			// nothing; an explicit empty one is not read as "no backup".
			if cmd.Flags().Changed("from-backup") {
				if err := checkBackupID(co.fromBackup); err != nil {
					return usageError{fmt.Errorf("env clone %s: %w", args[0], err)}
				}
			}
			req := resolver.CloneRequest{Cluster: cluster, Source: src, Target: args[1], TargetCluster: co.cluster, FromBackup: co.fromBackup, NamespacePrefix: co.namespacePrefix}
			if req.FromBackup != "" {
				note, err := cloneBackup(cmd.Context(), backupRecord, &req)
				if err != nil {
					return fmt.Errorf("env clone %s: %w", args[0], err)
				}
				if note != "" {
					fmt.Fprintln(stdout, note)
				}
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
		Annotations: map[string]string{readsRepo: "true", readsCommitWith: "commit"},
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
	repo, err := gitsource.Open(g.Repo, gitsource.OpenOptions{})
	if err != nil {
		return nil, err
	}
	if repo.Branch() == "" {
		return nil, errors.New("HEAD is detached: check out the branch to commit on (git switch BRANCH)")
	}
	dir, err := repo.Subdir(g.Repo)
	if err != nil {
		return nil, err
	}
	co, err := ident.commitOptions(repo, resolver.CommitOptions{Attempts: attempts, Dir: dir, RequireRepository: true})
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
	if len(p.NotInBackup) > 0 {
		fmt.Fprintf(stdout, "not in backup %s, so set up empty: %s\n", p.ClonedFrom.Backup, strings.Join(p.NotInBackup, ", "))
	}
	if p.BackupLocation != "" {
		fmt.Fprintf(stdout, "its backups go to %s\n", p.BackupLocation)
	}
	if p.DroppedSchedule {
		fmt.Fprintln(stdout, "backups.schedule and keep were not copied: a clone takes no scheduled backups (set them in its environment file if it should)")
	}
	if len(p.NotCopied) > 0 {
		fmt.Fprintf(stdout, "not copied, being no file Styrmin reads (a clone copies the environment and deployment files only, whose sensitive values it checks; copy these by hand if the clone needs them): %s\n", strings.Join(p.NotCopied, ", "))
	}
	printWarnings(stdout, p.Warnings)
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
