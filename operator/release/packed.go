package release

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"fmt"
	"io"

	kflate "github.com/klauspost/compress/flate"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// The agent keeps, for every release, the objects of its last revision and
// the field sets Styrmin owns on them, so a drift check needs neither the
// record nor a dry-run apply. Kept as they are (each object's JSON, each
// field set's JSON, their structs and map) they were about 5 KiB per
// deployment, 10 MB at 2,000; deflated together they are a fraction of it,
// unpacked for one check at a time.
//
// They are deflated without a compressor of their own: a flate writer
// holds about 1 MB of tables, for some 5 KiB of input, and a writer per
// packing was 40% of all the agent allocated at 2,000 deployments
// (4.6 GB). A stateless deflate keeps its small buffers in pools. The
// packed form never leaves the process, so it is raw deflate, without
// gzip's header and checksum.

// packedObject is one object of a packed revision with its field set.
type packedObject struct {
	Ref        v1alpha1.ObjectRef          `json:"ref"`
	Resource   schema.GroupVersionResource `json:"resource"`
	Namespaced bool                        `json:"namespaced,omitempty"`
	Data       json.RawMessage             `json:"data"`
	Keep       bool                        `json:"keep,omitempty"`
	Autoscaled bool                        `json:"autoscaled,omitempty"`
	Ignored    bool                        `json:"ignored,omitempty"`
	Namespace  string                      `json:"namespace"`
	// Fields is the field set expected, when HasFields (a set may be
	// known and empty; one not known is computed by the next check).
	Fields    json.RawMessage `json:"fields,omitempty"`
	HasFields bool            `json:"hasFields,omitempty"`
}

// pack encodes objects and their expected field sets (by objectKey).
func pack(objects []*desiredObject, expected map[string][]byte) ([]byte, error) {
	list := make([]packedObject, len(objects))
	for i, o := range objects {
		fields, ok := expected[objectKey(o.ref)]
		list[i] = packedObject{Ref: o.ref, Resource: o.gvr, Namespaced: o.namespaced, Data: o.data, Keep: o.keep,
			Autoscaled: o.autoscaled, Ignored: o.driftIgnored, Namespace: o.namespace, Fields: fields, HasFields: ok}
	}
	raw, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("packing the release's objects: %w", err)
	}
	var buf bytes.Buffer
	if err := kflate.StatelessDeflate(&buf, raw, true, nil); err != nil {
		return nil, fmt.Errorf("packing the release's objects: %w", err)
	}
	return bytes.Clone(buf.Bytes()), nil
}

// unpack decodes what pack encoded, each object's resource a client of
// dyn.
func unpack(dyn dynamic.Interface, packed []byte) ([]*desiredObject, map[string][]byte, error) {
	zr := flate.NewReader(bytes.NewReader(packed))
	defer zr.Close()
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, nil, fmt.Errorf("unpacking the release's objects: %w", err)
	}
	var list []packedObject
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, nil, fmt.Errorf("unpacking the release's objects: %w", err)
	}
	objects := make([]*desiredObject, len(list))
	expected := make(map[string][]byte, len(list))
	for i, p := range list {
		o := &desiredObject{ref: p.Ref, gvr: p.Resource, namespaced: p.Namespaced, data: p.Data, keep: p.Keep, autoscaled: p.Autoscaled,
			driftIgnored: p.Ignored, namespace: p.Namespace}
		o.resource = resourceOf(dyn, o.gvr, o.namespaced, o.ref.Namespace)
		objects[i] = o
		if p.HasFields {
			expected[objectKey(p.Ref)] = []byte(p.Fields)
		}
	}
	return objects, expected, nil
}

// resourceOf is the client of one object's resource.
func resourceOf(dyn dynamic.Interface, gvr schema.GroupVersionResource, namespaced bool, namespace string) dynamic.ResourceInterface {
	if namespaced {
		return dyn.Resource(gvr).Namespace(namespace)
	}
	return dyn.Resource(gvr)
}
