package task

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// TestACloneDoesNotRestoreAPartItsBackupDoesNotHoldOrHoldsFailed pins
// what a clone's create checks of the backup's record before it plans
// the restore: only the drivers were compared, so a create restored from
// a backup of some deployments only, one whose part of it failed, or one
// taken before the deployment was added, and its restore job read a
// missing or truncated artefact. Backup monday holds only hub's part,
// which failed: both hub's and db's creates are refused, each naming the
// backup and its part; tuesday, whose hub part succeeded, restores hub. A
// record of the source's ID in a cluster the clone went to is another
// backup (of that cluster's environment of the source's name), and
// decides nothing. A record whose artefact is not where the clone reads
// (the source's backupLocation moved since) is refused, saying where to
// read; so is a backup the source's cluster has no record of (deleted,
// its artefacts with it).
func TestACloneDoesNotRestoreAPartItsBackupDoesNotHoldOrHoldsFailed(t *testing.T) {
	t.Parallel()
	const ns = "styrmin-system"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	r, err := NewReconciler(Options{Client: cl, Drivers: noDrivers{}, AgentNamespace: ns, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	graphhub := v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}
	// backup records a backup of environment dev of cluster ("": the
	// agent's own).
	backup := func(name, cluster string, phase v1alpha1.OperationPhase, parts ...v1alpha1.OperationDeployment) {
		t.Helper()
		b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.StyrminBackupSpec{Cluster: cluster, Environment: "dev", Deployments: []string{"hub"}}}
		if err := cl.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		b.Status = v1alpha1.StyrminBackupStatus{Phase: phase, Location: "s3://backups/local/dev", Deployments: parts}
		if err := cl.Status().Update(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	failedHub := v1alpha1.OperationDeployment{Name: "hub", Namespace: "dev-hub", Phase: v1alpha1.OperationFailed, Driver: graphhub, Artifact: "s3://backups/local/dev/monday/hub"}
	backup("monday", "local", v1alpha1.OperationFailed, failedHub)
	backup("nightly", "", v1alpha1.OperationFailed, failedHub)
	backup("tuesday", "local", v1alpha1.OperationSucceeded,
		v1alpha1.OperationDeployment{Name: "hub", Namespace: "dev-hub", Phase: v1alpha1.OperationSucceeded, Driver: graphhub, Artifact: "s3://backups/local/dev/tuesday/hub"})
	// Written before dev's backupLocation moved to s3://backups-v2/dev.
	backup("moved", "local", v1alpha1.OperationSucceeded,
		v1alpha1.OperationDeployment{Name: "hub", Namespace: "dev-hub", Phase: v1alpha1.OperationSucceeded, Driver: graphhub, Artifact: "s3://old-backups/dev/moved/hub"})

	created := func(cluster, name, backupID string) *resolver.Instance {
		return &resolver.Instance{ID: resolver.ID{Cluster: cluster, Environment: "preview", Name: name}, Sequence: 1,
			Context: &drivers.Context{Environment: drivers.EnvironmentContext{BackupLocation: "s3://backups/" + cluster + "/preview",
				ClonedFrom: &drivers.CloneSource{Cluster: "local", Environment: "dev", Commit: "abcdef1", Backup: backupID, Location: "s3://backups/local/dev"}}}}
	}
	d := restoringDriver("graphhub", "1.4.0")
	for _, tc := range []struct {
		name            string
		cluster, dep, b string
		want            []string
	}{
		{"a part that failed", "local", "hub", "monday",
			[]string{"a clone of local/dev from backup monday", "backup of hub did not succeed (Failed)", "take hub out of clonedFrom.deployments"}},
		{"no part of the deployment", "local", "db", "monday",
			[]string{"a clone of local/dev from backup monday", "holds no backup of db (it holds: hub)", "take db out of clonedFrom.deployments"}},
		{"no part of it in a backup whose other parts succeeded", "local", "db", "tuesday",
			[]string{"backup tuesday", "holds no backup of db"}},
		{"a part that succeeded", "local", "hub", "tuesday", nil},
		{"a record of this cluster's own environment", "local", "hub", "nightly", []string{"backup of hub did not succeed (Failed)"}},
		{"a record of the source's ID in the cluster the clone went to", "other", "hub", "nightly", nil},
		{"a record whose artefact is not where the clone reads", "local", "hub", "moved",
			[]string{"has the artefact of hub at s3://old-backups/dev/moved/hub, where the restore would read s3://backups/local/dev/moved/hub", "set clonedFrom.location in the clone's environment file to s3://old-backups/dev"}},
		{"no record in the source's cluster: the backup was deleted", "local", "hub", "gone",
			[]string{"backup gone, of which this cluster has no record", "take hub out of clonedFrom.deployments"}},
		{"no record in another cluster: the source's cluster has it", "other", "hub", "gone", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, err := r.cloneRestoreRefusal(ctx, created(tc.cluster, tc.dep, tc.b), d)
			if err != nil {
				t.Fatal(err)
			}
			if (why == "") != (tc.want == nil) {
				t.Fatalf("refusal %q, want one saying %q", why, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(why, w) {
					t.Errorf("refusal %q lacks %q", why, w)
				}
			}
		})
	}
}

// TestACloneWithoutTheDeploymentsListIsToldToAddOneToStartEmpty pins the
// refusal's advice for a clone written before clonedFrom.deployments
// existed: it said to take the deployment out of a list its file does not
// have. Such a clone (every deployment restores) is told to add the list
// without the deployment; one with the list, to take the name out.
func TestACloneWithoutTheDeploymentsListIsToldToAddOneToStartEmpty(t *testing.T) {
	t.Parallel()
	const ns = "styrmin-system"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "monday", Namespace: ns},
		Spec: v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: "dev", Deployments: []string{"hub"}}}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status = v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "s3://backups/local/dev", Deployments: []v1alpha1.OperationDeployment{
		{Name: "hub", Namespace: "dev-hub", Phase: v1alpha1.OperationSucceeded, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}, Artifact: "s3://backups/local/dev/monday/hub"}}}
	if err := cl.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	cf := drivers.CloneSource{Cluster: "local", Environment: "dev", Commit: "abcdef1", Backup: "monday", Location: "s3://backups/local/dev"}
	db := &resolver.Instance{ID: resolver.ID{Cluster: "local", Environment: "preview", Name: "db"}, Sequence: 1,
		Context: &drivers.Context{Environment: drivers.EnvironmentContext{BackupLocation: "s3://backups/local/preview", ClonedFrom: &cf}}}
	for _, tc := range []struct {
		name       string
		list       []string
		want, lack string
	}{
		{"no list", nil, "add clonedFrom.deployments to the clone's environment file, listing the deployments to restore without db", "take db out"},
		{"a list", []string{"hub", "db"}, "take db out of clonedFrom.deployments", "add clonedFrom.deployments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			settings := func(context.Context, string, string) (resolver.EnvironmentBackups, error) {
				in := cf
				in.Deployments = tc.list
				return resolver.EnvironmentBackups{Cluster: "local", Environment: "preview", Location: "s3://backups/local/preview", ClonedFrom: &in}, nil
			}
			r, err := NewReconciler(Options{Client: cl, Drivers: noDrivers{}, AgentNamespace: ns, Registerer: prometheus.NewRegistry(), BackupSettings: settings})
			if err != nil {
				t.Fatal(err)
			}
			why, err := r.cloneRestoreRefusal(ctx, db, restoringDriver("graphhub", "1.4.0"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(why, "holds no backup of db") || !strings.Contains(why, tc.want) || strings.Contains(why, tc.lack) {
				t.Fatalf("refusal %q, want one saying %q and not %q", why, tc.want, tc.lack)
			}
		})
	}
}

// restoringDriver is a driver that can back up and restores a clone's
// backup in its setup hook.
func restoringDriver(name, version string) *drivers.Driver {
	return &drivers.Driver{Name: name, Version: version, Hooks: map[drivers.Hook]drivers.Modes{
		drivers.HookSetup:   {Post: []drivers.Step{{Action: drivers.ActionRestoreBackup}}},
		drivers.HookBackup:  {Core: []drivers.Step{{Action: drivers.ActionRunJob, Component: "db", Job: "dump"}}},
		drivers.HookRestore: {Core: []drivers.Step{{Action: drivers.ActionRunJob, Component: "db", Job: "load"}}},
	}}
}

// TestACloneWhoseDriverRestoresNoBackupInSetupIsRefusedNotCreatedEmpty
// pins a clone's create with a driver that can back up but whose setup
// hook has no restoreBackup step: the restore runs only at that step, so
// the create set the deployment up empty and Ready, a clone asked for
// the backup's data looking like one that has it. It is refused before
// any step, naming the driver and both ways out, whether this cluster
// holds the backup's record (the source's cluster) or not (a clone into
// another cluster); a deployment that restores nothing (not listed in
// clonedFrom) is not refused.
func TestACloneWhoseDriverRestoresNoBackupInSetupIsRefusedNotCreatedEmpty(t *testing.T) {
	t.Parallel()
	const ns = "styrmin-system"
	cl := withCRDs(t, ns)
	ctx := context.Background()
	r, err := NewReconciler(Options{Client: cl, Drivers: noDrivers{}, AgentNamespace: ns, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	graphhub := v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}
	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns},
		Spec: v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: "dev"}}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status = v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "s3://backups/local/dev", Deployments: []v1alpha1.OperationDeployment{
		{Name: "hub", Namespace: "dev-hub", Phase: v1alpha1.OperationSucceeded, Driver: graphhub, Artifact: "s3://backups/local/dev/nightly/hub"}}}
	if err := cl.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	noRestore := restoringDriver("graphhub", "1.4.0")
	noRestore.Hooks[drivers.HookSetup] = drivers.Modes{Post: []drivers.Step{{Action: drivers.ActionRunJob, Component: "db", Job: "init"}}}
	created := func(cluster string, cf *drivers.CloneSource) *resolver.Instance {
		return &resolver.Instance{ID: resolver.ID{Cluster: cluster, Environment: "preview", Name: "hub"}, Sequence: 1,
			Context: &drivers.Context{Environment: drivers.EnvironmentContext{BackupLocation: "s3://backups/" + cluster + "/preview", ClonedFrom: cf}}}
	}
	fromBackup := &drivers.CloneSource{Cluster: "local", Environment: "dev", Commit: "abcdef1", Backup: "nightly", Location: "s3://backups/local/dev"}
	for _, tc := range []struct {
		name    string
		in      *resolver.Instance
		d       *drivers.Driver
		refused bool
	}{
		{"the record in this cluster", created("local", fromBackup), noRestore, true},
		{"the record in the source's cluster", created("other", fromBackup), noRestore, true},
		{"a driver whose setup restores", created("local", fromBackup), restoringDriver("graphhub", "1.4.0"), false},
		{"a deployment that restores nothing", created("local", nil), noRestore, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, err := r.cloneRestoreRefusal(ctx, tc.in, tc.d)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.refused {
				if why != "" {
					t.Fatalf("refused: %q", why)
				}
				return
			}
			for _, w := range []string{"clone of local/dev from backup nightly", "driver graphhub@1.4.0's setup hook has no restoreBackup step", "set hub up empty", "take hub out of clonedFrom.deployments"} {
				if !strings.Contains(why, w) {
					t.Errorf("refusal %q lacks %q", why, w)
				}
			}
		})
	}
}

// TestACloneRestoresOnlyItsSourcesDataWhateverItsFilesCallTheSource pins
// the two checks that keep an environment's files from restoring another
// environment's backup into it by naming it in clonedFrom: dev's
// environment.cue calling prod's backup its own (clonedFrom.environment
// dev, prod's location) read prod's artefact, the record of another
// environment deciding nothing; and a restore job got credentials
// marked for the clone alone, while it reads the source's data. The
// create is refused naming the record's environment; the restore's job
// gets no credentials not marked for the source (refused naming it), and
// gets them when the Secret lists both.
func TestACloneRestoresOnlyItsSourcesDataWhateverItsFilesCallTheSource(t *testing.T) {
	t.Parallel()
	const agent, ns = "styrmin-system", "dev-hub"
	cl := withCRDs(t, agent)
	ctx := context.Background()
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	b := &v1alpha1.StyrminBackup{ObjectMeta: metav1.ObjectMeta{Name: "prod-20261201-0300", Namespace: agent},
		Spec: v1alpha1.StyrminBackupSpec{Cluster: "local", Environment: "prod"}}
	if err := cl.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status = v1alpha1.StyrminBackupStatus{Phase: v1alpha1.OperationSucceeded, Location: "s3://backups/local/prod", Deployments: []v1alpha1.OperationDeployment{
		{Name: "hub", Namespace: "prod-hub", Phase: v1alpha1.OperationSucceeded, Driver: v1alpha1.DriverRef{Name: "graphhub", Version: "1.4.0"}, Artifact: "s3://backups/local/prod/prod-20261201-0300/hub"}}}
	if err := cl.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "dev-keys", Namespace: agent,
		Labels: map[string]string{LabelBackupCredentials: "true"}, Annotations: map[string]string{AnnotationBackupEnvironments: "local/dev"}},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "AKIA-dev", "AWS_SECRET_ACCESS_KEY": "dev-secret-key"}}
	if err := cl.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	r := devBackupReconciler(t, cl, agent, "dev-keys")

	// dev's files call prod's backup dev's own.
	misnamed := devHubClonedFrom(drivers.CloneSource{Cluster: "local", Environment: "dev", Commit: "abcdef1", Backup: "prod-20261201-0300", Location: "s3://backups/local/prod"})
	why, err := r.cloneRestoreRefusal(ctx, misnamed, restoringDriver("graphhub", "1.4.0"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"s3://backups/local/prod/prod-20261201-0300/hub", "is of local/prod, not of local/dev", "a clone restores only its source's backups"} {
		if !strings.Contains(why, w) {
			t.Errorf("create refusal %q lacks %q", why, w)
		}
	}

	// dev's files name prod as the source: the create may restore it (the
	// record agrees), but dev's credentials are not prod's.
	fromProd := devHubClonedFrom(drivers.CloneSource{Cluster: "local", Environment: "prod", Commit: "abcdef1", Backup: "prod-20261201-0300", Location: "s3://backups/local/prod"})
	if why, err := r.cloneRestoreRefusal(ctx, fromProd, restoringDriver("graphhub", "1.4.0")); err != nil || why != "" {
		t.Fatalf("a clone of prod refused: %q, %v", why, err)
	}
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "hub"}
	tk := &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Name: "hub-1", Namespace: ns, Labels: id.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowCreate, ToSequence: 1,
			Lock: v1alpha1.LockRef{Commit: "c1", Path: "locks/local/dev/hub.lock.yaml"}}}
	if err := cl.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	args := map[string]string{argOperation: "restore", argJob: "load", argBackupID: "prod-20261201-0300", argArtifact: "s3://backups/local/prod/prod-20261201-0300/hub"}
	step := drivers.Step{Action: drivers.ActionRunJob, Component: "db", Job: "load", Args: args}
	withCredentials := func() (*corev1.PodSpec, error) {
		pod := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "db", Image: "busybox"}}}
		err := r.withOperation(ctx, &taskRun{task: tk, log: logr.Discard(), instance: fromProd}, step, &pod, &pod.Containers[0])
		return &pod, err
	}
	pod, err := withCredentials()
	if err == nil || len(pod.Containers[0].EnvFrom) > 0 {
		t.Fatalf("the restore of prod's backup got dev's credentials (error %v, envFrom %v)", err, pod.Containers[0].EnvFrom)
	}
	for _, w := range []string{"reads the data of local/prod, the environment local/dev/hub was cloned from", `is for environments "local/dev"`, "not local/prod"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q lacks %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "dev-secret-key") {
		t.Errorf("refusal %q shows the Secret's value", err)
	}
	var copies corev1.SecretList
	if err := cl.List(ctx, &copies, client.InNamespace(ns)); err != nil || len(copies.Items) != 0 {
		t.Fatalf("copies of the credentials in %s: %d (%v), want none", ns, len(copies.Items), err)
	}

	// Marked for both: the platform team consents to the clone.
	secret.Annotations[AnnotationBackupEnvironments] = "local/dev, local/prod"
	if err := cl.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if pod, err := withCredentials(); err != nil || len(pod.Containers[0].EnvFrom) != 1 {
		t.Fatalf("credentials marked for both: error %v, envFrom %v", err, pod.Containers[0].EnvFrom)
	}
}

// TestACloneFromAnotherClustersBackupNeedsCredentialsMarkedForItsSource
// pins who consents to a clone's restore reading another cluster's
// backup. This cluster holds no record of it, so the clone's files alone
// said whose data the artefact was: dev's environment.cue naming
// other/prod as its source (and any location, this cluster's prod's
// included) restored it with an unannotated Secret, which is open to
// every environment's own backups. The job now gets no unannotated
// Secret for such a restore, refused naming the Secret and the
// annotation to add; annotated for both, it gets it. A source of this
// cluster, whose record the create checks, still restores with an
// unannotated Secret.
func TestACloneFromAnotherClustersBackupNeedsCredentialsMarkedForItsSource(t *testing.T) {
	t.Parallel()
	const agent, ns = "styrmin-system", "dev-hub"
	cl := withCRDs(t, agent)
	ctx := context.Background()
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "backup-credentials", Namespace: agent,
		Labels: map[string]string{LabelBackupCredentials: "true"}},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "AKIA-local", "AWS_SECRET_ACCESS_KEY": "local-secret-key"}}
	if err := cl.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	r := devBackupReconciler(t, cl, agent, "backup-credentials")
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "hub"}
	tk := &v1alpha1.StyrminTask{ObjectMeta: metav1.ObjectMeta{Name: "hub-1", Namespace: ns, Labels: id.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowCreate, ToSequence: 1,
			Lock: v1alpha1.LockRef{Commit: "c1", Path: "locks/local/dev/hub.lock.yaml"}}}
	if err := cl.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	restore := func(in *resolver.Instance) (*corev1.PodSpec, error) {
		cf := in.Context.Environment.ClonedFrom
		art := resolver.ArtifactURL(cf.Location, cf.Backup, "hub")
		args := map[string]string{argOperation: "restore", argJob: "load", argBackupID: cf.Backup, argArtifact: art}
		step := drivers.Step{Action: drivers.ActionRunJob, Component: "db", Job: "load", Args: args}
		pod := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "db", Image: "busybox"}}}
		err := r.withOperation(ctx, &taskRun{task: tk, log: logr.Discard(), instance: in}, step, &pod, &pod.Containers[0])
		return &pod, err
	}

	// dev's files name prod of cluster other, reading this cluster's prod
	// location: nothing here can check it.
	hostile := devHubClonedFrom(drivers.CloneSource{Cluster: "other", Environment: "prod", Commit: "abcdef1", Backup: "prod-20261101-0300", Location: "s3://backups/local/prod"})
	if why, err := r.cloneRestoreRefusal(ctx, hostile, restoringDriver("graphhub", "1.4.0")); err != nil || why != "" {
		t.Fatalf("create refusal %q, %v: the record is in the other cluster", why, err)
	}
	pod, err := restore(hostile)
	if err == nil || len(pod.Containers[0].EnvFrom) > 0 {
		t.Fatalf("the restore of another cluster's backup got an unannotated Secret (error %v, envFrom %v)", err, pod.Containers[0].EnvFrom)
	}
	for _, w := range []string{"reads the data of other/prod", "in another cluster", "Secret styrmin-system/backup-credentials has no annotation styrmin.io/backup-environments", `styrmin.io/backup-environments="local/dev, other/prod"`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q lacks %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "local-secret-key") {
		t.Errorf("refusal %q shows the Secret's value", err)
	}
	var copies corev1.SecretList
	if err := cl.List(ctx, &copies, client.InNamespace(ns)); err != nil || len(copies.Items) != 0 {
		t.Fatalf("copies of the credentials in %s: %d (%v), want none", ns, len(copies.Items), err)
	}

	// A source of this cluster: its record is checked at the create.
	if pod, err := restore(devHubClonedFrom(drivers.CloneSource{Cluster: "local", Environment: "prod", Commit: "abcdef1", Backup: "prod-20261201-0300", Location: "s3://backups/local/prod"})); err != nil || len(pod.Containers[0].EnvFrom) != 1 {
		t.Fatalf("a clone of this cluster's prod with an unannotated Secret: error %v, envFrom %v", err, pod.Containers[0].EnvFrom)
	}

	// Annotated for both: the platform team consents.
	secret.Annotations = map[string]string{AnnotationBackupEnvironments: "local/dev, other/prod"}
	if err := cl.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if pod, err := restore(hostile); err != nil || len(pod.Containers[0].EnvFrom) != 1 {
		t.Fatalf("credentials marked for both: error %v, envFrom %v", err, pod.Containers[0].EnvFrom)
	}
}

// devBackupReconciler is a task reconciler of agent namespace agent
// whose dev environment of cluster local backs up to
// s3://backups/local/dev with Secret secret.
func devBackupReconciler(t *testing.T, cl client.Client, agent, secret string) *Reconciler {
	t.Helper()
	settings := func(context.Context, string, string) (resolver.EnvironmentBackups, error) {
		return resolver.EnvironmentBackups{Cluster: "local", Environment: "dev", Location: "s3://backups/local/dev", Secret: secret}, nil
	}
	r, err := NewReconciler(Options{Client: cl, Drivers: noDrivers{}, AgentNamespace: agent, Registerer: prometheus.NewRegistry(), BackupSettings: settings})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// devHubClonedFrom is the first instance of local/dev/hub, cloned from
// cf.
func devHubClonedFrom(cf drivers.CloneSource) *resolver.Instance {
	return &resolver.Instance{Kind: resolver.KindInstance, ID: resolver.ID{Cluster: "local", Environment: "dev", Name: "hub"}, Sequence: 1,
		Context: &drivers.Context{Environment: drivers.EnvironmentContext{BackupLocation: "s3://backups/local/dev", ClonedFrom: &cf}}}
}
