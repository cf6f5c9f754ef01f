package release

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// Sensitive values reach the cluster only here. A release's manifest and
// values (its Helm record) hold the placeholders the instance holds; the
// values are written to the Secret v1alpha1.SensitiveSecretName of the
// release's namespace and put in place of their placeholders in each
// object's body as it is applied (install, upgrade, drift check and
// correction alike), so the record is what Helm shows and the live
// objects are what the application needs.

// sensitiveSecrets reads and writes the Secret of a namespace's sensitive
// values.
type sensitiveSecrets struct {
	cs kubernetes.Interface
}

// write makes the namespace's Secret hold exactly values (keyed by
// placeholder digest). No values: nothing is written (Apply removes the
// Secret once a revision without values deployed).
func (s *sensitiveSecrets) write(ctx context.Context, namespace string, values resolver.Sensitive) error {
	if len(values) == 0 {
		return nil
	}
	data := make(map[string][]byte, len(values))
	for ph, v := range values {
		d, ok := resolver.PlaceholderDigest(ph)
		if !ok {
			return fmt.Errorf("sensitive values of %s: %q is no placeholder", namespace, ph)
		}
		data[d] = []byte(v)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SensitiveSecretName, Namespace: namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "styrmin"}},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	secrets := s.cs.CoreV1().Secrets(namespace)
	cur, err := secrets.Get(ctx, secret.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
	case err == nil:
		cur.Data, cur.Type = data, secret.Type
		_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		// The error names the Secret, never a value.
		return fmt.Errorf("writing the sensitive values of %s to Secret %s: %w", namespace, v1alpha1.SensitiveSecretName, err)
	}
	return nil
}

// remove deletes the namespace's Secret of sensitive values, if any.
func (s *sensitiveSecrets) remove(ctx context.Context, namespace string) error {
	err := s.cs.CoreV1().Secrets(namespace).Delete(ctx, v1alpha1.SensitiveSecretName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Secret %s: %w", v1alpha1.SensitiveSecretName, err)
	}
	return nil
}

// ErrSensitiveValuesGone is returned (wrapped) when an object's
// placeholders are to be revealed (a drift check's dry-run, a correction)
// and the namespace's Secret of sensitive values is gone (deleted by
// hand). Only an apply writes it: as for ErrReleaseGone, the release
// needs applying again, or every check would fail until git changed.
var ErrSensitiveValuesGone = errors.New("the Secret of the release's sensitive values is gone")

// read returns the namespace's sensitive values by digest.
func (s *sensitiveSecrets) read(ctx context.Context, namespace string) (map[string][]byte, error) {
	sec, err := s.cs.CoreV1().Secrets(namespace).Get(ctx, v1alpha1.SensitiveSecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: Secret %s of %s not found", ErrSensitiveValuesGone, v1alpha1.SensitiveSecretName, namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the sensitive values of %s (Secret %s): %w", namespace, v1alpha1.SensitiveSecretName, err)
	}
	return sec.Data, nil
}

// placeholderMark is the placeholder prefix, to find it in any case.
var placeholderMark = []byte(resolver.PlaceholderPrefix)

// NeedsReveal reports whether an object's JSON body holds a placeholder,
// in a string or (a Secret) in its base64 data: objects without one are
// applied as they are, and the Secret of values is read only for the
// others.
func NeedsReveal(data []byte) bool {
	if bytes.Contains(bytes.ToLower(data), placeholderMark) {
		return true
	}
	if !bytes.Contains(data, []byte(`"Secret"`)) {
		return false
	}
	var obj struct {
		Kind string            `json:"kind"`
		Data map[string][]byte `json:"data"`
	}
	if json.Unmarshal(data, &obj) != nil || obj.Kind != "Secret" {
		return false
	}
	for _, v := range obj.Data {
		if bytes.Contains(bytes.ToLower(v), placeholderMark) {
			return true
		}
	}
	return false
}

// Reveal returns an object's JSON body with each placeholder replaced by
// its value (values by digest): in every string, and in a Secret's data
// (base64) after decoding. A placeholder left in another form (the chart
// upper-cased or encoded it) or without a value is an error: the driver
// must use a sensitive value as it is, and the object would be applied
// with nonsense in its place.
func Reveal(data []byte, values map[string][]byte) ([]byte, error) {
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, err
	}
	isSecret := obj["kind"] == "Secret" && obj["apiVersion"] == "v1"
	var err error
	for k, v := range obj {
		if isSecret && k == "data" {
			if m, ok := v.(map[string]any); ok {
				for dk, dv := range m {
					s, _ := dv.(string)
					raw, derr := base64.StdEncoding.DecodeString(s)
					if derr != nil {
						continue
					}
					out, rerr := revealString(string(raw), values)
					if rerr != nil {
						return nil, fmt.Errorf("data.%s: %w", dk, rerr)
					}
					m[dk] = base64.StdEncoding.EncodeToString([]byte(out))
				}
				continue
			}
		}
		if obj[k], err = revealValue(v, values); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return json.Marshal(obj)
}

func revealValue(v any, values map[string][]byte) (any, error) {
	switch t := v.(type) {
	case string:
		return revealString(t, values)
	case map[string]any:
		for k, x := range t {
			r, err := revealValue(x, values)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			t[k] = r
		}
	case []any:
		for i, x := range t {
			r, err := revealValue(x, values)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			t[i] = r
		}
	}
	return v, nil
}

// revealString replaces the placeholders of s.
func revealString(s string, values map[string][]byte) (string, error) {
	if !strings.Contains(strings.ToLower(s), resolver.PlaceholderPrefix) {
		return s, nil
	}
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, resolver.PlaceholderPrefix)
		if i < 0 {
			break
		}
		end := i + len(resolver.PlaceholderPrefix) + 64
		if end > len(rest) {
			return "", fmt.Errorf("a sensitive value's placeholder is cut short: the driver must use the value as it is")
		}
		d, ok := resolver.PlaceholderDigest(rest[i:end])
		if !ok {
			return "", fmt.Errorf("a sensitive value's placeholder was changed by the chart: the driver must use the value as it is")
		}
		v, ok := values[d]
		if !ok {
			return "", fmt.Errorf("Secret %s holds no value for placeholder %s", v1alpha1.SensitiveSecretName, d[:12])
		}
		b.WriteString(rest[:i])
		b.Write(v)
		rest = rest[end:]
	}
	b.WriteString(rest)
	if strings.Contains(strings.ToLower(rest), resolver.PlaceholderPrefix) {
		return "", fmt.Errorf("a sensitive value's placeholder was changed by the chart (its case): the driver must use the value as it is")
	}
	return b.String(), nil
}
