package resolver

import (
	yamlv2 "go.yaml.in/yaml/v2"

	"github.com/styrmin/styrmin/internal/blockyaml"
)

// jsonToYAML is sigs.k8s.io/yaml's JSONToYAML, byte for byte (lockfile
// checksums depend on it), without its slowest half: JSONToYAML parses
// the JSON text with go-yaml to learn each number's type, which cost a
// sixth of a lock's CPU. Here encoding/json parses it, and each number
// gets the type go-yaml's resolver gives its text (int, int64, uint64 or
// float64); go-yaml then encodes the same values. TestJSONToYAMLIsSigsYAML
// and FuzzJSONToYAML pin the equality. Where JSONToYAML's own YAML reader
// got the JSON wrong, this writes what the JSON holds instead: a value
// holding a character the reader refuses (DEL, C1 controls) failed and is
// written escaped; a key longer than 1,024 characters failed and is
// written as an explicit key; U+0085 (NEL), which the reader took for a
// line break, came out as a space and is written escaped.
func jsonToYAML(j []byte) ([]byte, error) {
	v, err := blockyaml.FromJSON(j)
	if err != nil {
		return nil, err
	}
	// Most documents (lockfiles of usual values) are within what
	// blockyaml writes as go-yaml does, at a fifth of its cost.
	if m, ok := v.(yamlv2.MapSlice); ok {
		if b, ok := blockyaml.Encode(m); ok {
			return b, nil
		}
	}
	return yamlv2.Marshal(v)
}
