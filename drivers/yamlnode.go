package drivers

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// toNode builds a YAML node tree from JSON-like data without encoding and
// parsing text (patching converts every patched object twice).
func toNode(x any) *kyaml.Node {
	switch t := x.(type) {
	case map[string]any:
		n := &kyaml.Node{Kind: kyaml.MappingNode, Tag: kyaml.NodeTagMap}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		n.Content = make([]*kyaml.Node, 0, 2*len(keys))
		for _, k := range keys {
			n.Content = append(n.Content, &kyaml.Node{Kind: kyaml.ScalarNode, Tag: kyaml.NodeTagString, Value: k}, toNode(t[k]))
		}
		return n
	case []any:
		n := &kyaml.Node{Kind: kyaml.SequenceNode, Tag: kyaml.NodeTagSeq, Content: make([]*kyaml.Node, len(t))}
		for i, v := range t {
			n.Content[i] = toNode(v)
		}
		return n
	case string:
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: kyaml.NodeTagString, Value: t}
	case bool:
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: kyaml.NodeTagBool, Value: strconv.FormatBool(t)}
	case int64:
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: kyaml.NodeTagInt, Value: strconv.FormatInt(t, 10)}
	case int:
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: kyaml.NodeTagInt, Value: strconv.Itoa(t)}
	case float64:
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: kyaml.NodeTagFloat, Value: strconv.FormatFloat(t, 'g', -1, 64)}
	case nil:
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: kyaml.NodeTagNull, Value: "null"}
	default:
		return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: kyaml.NodeTagString, Value: fmt.Sprint(t)}
	}
}

// fromNode is the inverse of toNode. Scalars the merge created without a
// tag are resolved the way YAML resolves plain scalars.
func fromNode(n *kyaml.Node) (any, error) {
	switch n.Kind {
	case kyaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return fromNode(n.Content[0])
	case kyaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := fromNode(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = v
		}
		return m, nil
	case kyaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, c := range n.Content {
			v, err := fromNode(c)
			if err != nil {
				return nil, err
			}
			l[i] = v
		}
		return l, nil
	case kyaml.AliasNode:
		return fromNode(n.Alias)
	}
	switch n.Tag {
	case kyaml.NodeTagString:
		return n.Value, nil
	case kyaml.NodeTagInt:
		if i, err := strconv.ParseInt(n.Value, 0, 64); err == nil {
			return i, nil
		}
	case kyaml.NodeTagFloat:
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return f, nil
		}
	case kyaml.NodeTagBool:
		if b, err := strconv.ParseBool(n.Value); err == nil {
			return b, nil
		}
	case kyaml.NodeTagNull:
		return nil, nil
	}
	var x any
	if err := n.Decode(&x); err != nil {
		return nil, err
	}
	return normalizeNumbers(x), nil
}
