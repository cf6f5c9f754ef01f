package resolver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/styrmin/styrmin/drivers"
)

// PlaceholderPrefix starts every placeholder of a sensitive value.
//
// A parameter marked @styrmin(sensitive) is in clear only in the
// configuration file its author wrote. Everything the engine derives from
// it (the instance and so the lockfile, the plan, explain, the
// StyrminDeployment and StyrminTask, the Helm release record) holds the
// placeholder instead: the value is replaced before the driver's values
// are evaluated and before anything is rendered, so no transformed form of
// it (upper-cased, base64-encoded, URL-encoded, a substring) can reach an
// output. Only the agent puts the value back, into the objects it applies
// (see Reveal).
const PlaceholderPrefix = "styrmin:sensitive:"

// placeholderKey is the HMAC key's fixed part. The key also holds the
// deployment and the parameter, so one value used by two deployments (or
// two parameters) gives two unrelated digests: a lockfile does not tell
// that two passwords are equal, and no table precomputed for one
// repository serves another. The key is not secret: resolution must stay
// deterministic from git alone (same commit, same lockfiles), and whoever
// can read the lockfile can read the configuration beside it. The digest
// changes whenever the value does, so a new password is a change.
const placeholderKey = "styrmin.io/sensitive/v1"

// Placeholder is what instances hold instead of the value of sensitive
// parameter param of deployment id: PlaceholderPrefix and the hex HMAC-SHA256
// of the value (a valid Secret key, so the agent keys its Secret by it).
func Placeholder(id ID, param, value string) string {
	mac := hmac.New(sha256.New, []byte(placeholderKey+"\x00"+id.String()+"\x00"+param))
	mac.Write([]byte(value))
	return PlaceholderPrefix + hex.EncodeToString(mac.Sum(nil))
}

// PlaceholderDigest returns the digest of a placeholder (its Secret key)
// and whether s is one.
func PlaceholderDigest(s string) (string, bool) {
	d, ok := strings.CutPrefix(s, PlaceholderPrefix)
	if !ok || len(d) != sha256.Size*2 {
		return "", false
	}
	if _, err := hex.DecodeString(d); err != nil {
		return "", false
	}
	return d, true
}

// Sensitive maps the placeholders of one instance to their values. It is
// never part of an instance, and never written anywhere but the Secret
// the agent applies the release with.
type Sensitive map[string]string

// hidePlaceholders replaces the values of drv's sensitive parameters in
// params (already applied: defaults filled in) by their placeholders, in
// place, and returns the values by placeholder. A sensitive parameter is
// a string (the driver load refuses others), so the driver's values
// mapping takes the placeholder where it took the value.
func hidePlaceholders(id ID, drv *drivers.Driver, params map[string]any) Sensitive {
	var out Sensitive
	for _, p := range drv.Parameters {
		if !p.Sensitive || p.Secret {
			continue
		}
		v, ok := params[p.Name].(string)
		if !ok {
			continue
		}
		ph := Placeholder(id, p.Name, v)
		if out == nil {
			out = Sensitive{}
		}
		out[ph] = v
		params[p.Name] = ph
	}
	return out
}

// RevealSensitive finds the values behind the placeholders of instance in
// the configuration repo (loaded at the instance's source commit) and the
// driver drv it was resolved with: the agent's way back from a lockfile,
// which never holds them, to the objects it applies. Each value is checked
// against its placeholder, so the agent applies exactly what was locked;
// a configuration that no longer gives it is an error naming the
// parameter, never the value.
func RevealSensitive(repo *Repository, drv *drivers.Driver, in *Instance) (Sensitive, error) {
	if in.Context == nil {
		return nil, nil
	}
	var names []string
	for name, v := range in.Context.Parameters {
		if s, ok := v.(string); ok {
			if _, ok := PlaceholderDigest(s); ok {
				names = append(names, name)
			}
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	sort.Strings(names)
	applied, err := configuredParameters(repo, drv, in)
	if err != nil {
		return nil, err
	}
	out := Sensitive{}
	for _, name := range names {
		ph := in.Context.Parameters[name].(string)
		v, ok := applied[name].(string)
		if !ok || Placeholder(in.ID, name, v) != ph {
			return nil, fmt.Errorf("sensitive parameter %s of %s: the configuration at commit %s does not give the locked value (value hidden)", name, in.ID, in.SourceCommit)
		}
		out[ph] = v
	}
	return out, nil
}

// configuredParameters are the parameters repo gives in, applied to drv:
// an application deployment's layers merged, or an ingress controller's
// ingress.parameters (its cluster's ingress: block, which the cluster's
// settings do not hold).
func configuredParameters(repo *Repository, drv *drivers.Driver, in *Instance) (map[string]any, error) {
	if in.Internal == InternalIngress {
		for _, c := range repo.Clusters {
			if c.Name != in.ID.Cluster {
				continue
			}
			if c.Ingress == nil {
				break
			}
			applied, err := ingressParameters(c, drv)
			if err != nil {
				return nil, fmt.Errorf("sensitive parameters of %s: %w", in.ID, err)
			}
			return applied, nil
		}
		return nil, fmt.Errorf("sensitive parameters of %s: the configuration at commit %s declares no ingress controller of cluster %s", in.ID, in.SourceCommit, in.ID.Cluster)
	}
	c, e, d := findDeployment(repo, in.ID)
	if d == nil {
		return nil, fmt.Errorf("sensitive parameters of %s: the deployment is not in the configuration at commit %s", in.ID, in.SourceCommit)
	}
	merged := map[string]any{}
	for _, s := range []map[string]any{c.Settings, e.Settings, d.Settings} {
		mergeInto(merged, s, "", Origin{}, Provenance{})
	}
	params, _ := merged["parameters"].(map[string]any)
	applied, err := drv.ApplyParameters(onlyDeclared(drv, params))
	if err != nil {
		return nil, fmt.Errorf("sensitive parameters of %s: %w", in.ID, err)
	}
	return applied, nil
}

// onlyDeclared is a copy of params with the parameters drv declares.
func onlyDeclared(drv *drivers.Driver, params map[string]any) map[string]any {
	out := map[string]any{}
	for _, p := range drv.Parameters {
		if v, ok := params[p.Name]; ok {
			out[p.Name] = deepCopy(v)
		}
	}
	return out
}

// findDeployment returns the layers of deployment id in repo (nil d when
// it is not there).
func findDeployment(repo *Repository, id ID) (*Cluster, *Environment, *Deployment) {
	for _, c := range repo.Clusters {
		for _, e := range c.Environments {
			for _, d := range e.Deployments {
				if d.ID == id {
					return c, e, d
				}
			}
		}
	}
	return nil, nil, nil
}

// RevealSensitiveFS is RevealSensitive over the configuration in fsys (the
// desired-state repository at the instance's source commit). An instance
// without placeholders reads nothing.
func RevealSensitiveFS(fsys fs.FS, drv *drivers.Driver, in *Instance) (Sensitive, error) {
	return NewLoader(0).RevealSensitiveFS(fsys, drv, in)
}

// RevealSensitiveFS is RevealSensitiveFS with this Loader (and its
// sandbox).
func (l *Loader) RevealSensitiveFS(fsys fs.FS, drv *drivers.Driver, in *Instance) (Sensitive, error) {
	if !HasPlaceholders(in) {
		return nil, nil
	}
	repo, err := l.Load(fsys)
	if err != nil {
		return nil, fmt.Errorf("sensitive parameters of %s: %w", in.ID, err)
	}
	return RevealSensitive(repo, drv, in)
}

// HasPlaceholders reports whether the instance holds the placeholder of a
// sensitive value.
func HasPlaceholders(in *Instance) bool {
	if in == nil || in.Context == nil {
		return false
	}
	for _, v := range in.Context.Parameters {
		if s, ok := v.(string); ok {
			if _, ok := PlaceholderDigest(s); ok {
				return true
			}
		}
	}
	return false
}

// Masked is what Mask writes in place of a sensitive value.
const Masked = "(sensitive)"

// Mask replaces every sensitive value of s in text, in each form a
// program's output may give it (as is, upper- or lower-cased, base64 with
// or without padding, standard or URL alphabet, base64 twice, URL-encoded),
// by Masked. It is for text the engine does not render itself (a
// command's output, a Job's logs): what it renders holds placeholders.
func (s Sensitive) Mask(text string) string {
	if len(s) == 0 || text == "" {
		return text
	}
	var forms []string
	for _, v := range s {
		if v == "" {
			continue
		}
		b := []byte(v)
		std := base64.StdEncoding.EncodeToString(b)
		forms = append(forms, v, strings.ToUpper(v), strings.ToLower(v),
			std, base64.RawStdEncoding.EncodeToString(b),
			base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
			base64.StdEncoding.EncodeToString([]byte(std)), base64.RawStdEncoding.EncodeToString([]byte(std)),
			url.QueryEscape(v), url.PathEscape(v))
		// As JSON and Go's %q write it (\u0026 for &, \" for ", \n).
		if j, err := json.Marshal(v); err == nil {
			forms = append(forms, string(j[1:len(j)-1]))
		}
		if q := strconv.Quote(v); len(q) > 2 {
			forms = append(forms, q[1:len(q)-1])
		}
	}
	// Longest first: a form inside a longer one goes with it.
	sort.Slice(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	for _, f := range forms {
		text = strings.ReplaceAll(text, f, Masked)
	}
	return text
}

// SensitiveByDigest is the Sensitive of values keyed by placeholder
// digest, as the agent's Secret holds them.
func SensitiveByDigest(values map[string][]byte) Sensitive {
	out := make(Sensitive, len(values))
	for d, v := range values {
		out[PlaceholderPrefix+d] = string(v)
	}
	return out
}

// WithPlaceholders returns in when it holds none of the parameters named
// sensitive in clear, else a copy whose values of them are replaced by
// their placeholders and whose chart values drv evaluates again from that
// context. A lockfile written before instances held placeholders, or
// before its driver marked a parameter sensitive, has the values in clear;
// what is shown of it (the plan) is rendered from the copy, so no form of
// a value can reach the output. The copy keeps the digest: it is for
// display, never locked.
func WithPlaceholders(in *Instance, drv *drivers.Driver, sensitive map[string]bool) (*Instance, error) {
	if in == nil || in.Context == nil || drv == nil {
		return in, nil
	}
	inClear := func(params map[string]any) []string {
		var names []string
		for name := range sensitive {
			if v, ok := params[name].(string); ok {
				if _, isPlaceholder := PlaceholderDigest(v); !isPlaceholder {
					names = append(names, name)
				}
			}
		}
		return names
	}
	names := inClear(in.Context.Parameters)
	if len(names) == 0 {
		return in, nil
	}
	out := *in
	ctx := *in.Context
	ctx.Parameters = deepCopy(in.Context.Parameters).(map[string]any)
	for _, name := range names {
		ctx.Parameters[name] = Placeholder(in.ID, name, ctx.Parameters[name].(string))
	}
	values, err := drv.Values(ctx)
	if err != nil {
		// Worded without the values: CUE's message could quote one.
		return nil, fmt.Errorf("%s: the values of driver %s@%s do not evaluate with its sensitive values hidden", in.ID, drv.Name, drv.Version)
	}
	out.Context, out.Values = &ctx, values
	return &out, nil
}
