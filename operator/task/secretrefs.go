package task

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// secretRefValues returns the values of the Secret keys the deployment's
// secret parameters (#SecretRef) name, to be masked in what its steps
// report. The instance holds only the references; the workloads, and the
// Jobs and exec'd commands that take their pod templates, read the values
// (a migration's connection string, printed on failure). Values shorter
// than minCredentialLength are left: masking them would garble the
// output and hide nothing. A Secret that does not exist gave a job
// nothing to print.
func (r *Reconciler) secretRefValues(ctx context.Context, run *taskRun) (resolver.Sensitive, error) {
	in := run.instance
	if in == nil || in.Tombstone() || in.Context == nil {
		return nil, nil
	}
	keys := map[string][]string{} // Secret name → its keys named
	if hasSecretRef(in) {
		d, err := r.driver(ctx, run)
		if err != nil {
			// A driver that does not load ran no job that could print a
			// value: what is redacted then is the agent's own message
			// (that the driver does not load), which must stay readable.
			return nil, nil
		}
		addSecretRefs(keys, in, d)
	}
	if slices.ContainsFunc(run.task.Status.Steps, func(st v1alpha1.TaskStep) bool { return inlineBackup(run.task, st.Args) }) {
		// The backup an upgrade takes first runs the running instance's
		// pod (backupSource), which its own references fill.
		if bin, bd, ok, err := r.backupSource(ctx, run); err == nil && ok && hasSecretRef(bin) {
			addSecretRefs(keys, bin, bd)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	a, err := r.actor(ctx, run)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(keys))
	for name := range keys {
		names = append(names, name)
	}
	slices.Sort(names)
	out := resolver.Sensitive{}
	for _, name := range names {
		var sec corev1.Secret
		key := client.ObjectKey{Namespace: run.task.Spec.Namespace, Name: name}
		if err := a.Reader.Get(ctx, key, &sec); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("reading the Secret %s: %w", key, err)
		}
		for _, k := range keys[name] {
			value := string(sec.Data[k])
			trimmed := strings.TrimSpace(value)
			if len(trimmed) < minCredentialLength {
				continue
			}
			out["secret/"+name+"/"+k] = value
			out["secret/"+name+"/"+k+"/trimmed"] = trimmed
		}
	}
	return out, nil
}

// hasSecretRef reports whether a parameter of in is shaped like a secret
// reference: without one, no driver needs loading to find them.
func hasSecretRef(in *resolver.Instance) bool {
	return in.Context != nil && slices.ContainsFunc(slices.Collect(maps.Values(in.Context.Parameters)), func(v any) bool { return secretRef(v) != [2]string{} })
}

// addSecretRefs adds to keys the Secret keys in's secret parameters (of
// driver d) name.
func addSecretRefs(keys map[string][]string, in *resolver.Instance, d *drivers.Driver) {
	for _, p := range d.Parameters {
		if !p.Secret {
			continue
		}
		ref := secretRef(in.Context.Parameters[p.Name])
		if name, key := ref[0], ref[1]; name != "" && !slices.Contains(keys[name], key) {
			keys[name] = append(keys[name], key)
		}
	}
}

// secretRef is the Secret name and key a secret parameter's value names
// (zero when v is no {name, key} of strings).
func secretRef(v any) [2]string {
	m, ok := v.(map[string]any)
	if !ok {
		return [2]string{}
	}
	name, _ := m["name"].(string)
	key, _ := m["key"].(string)
	if name == "" || key == "" {
		return [2]string{}
	}
	return [2]string{name, key}
}
