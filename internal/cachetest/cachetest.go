// Package cachetest stands for an informer's cache that lags behind the
// API server: it serves a copy of one object read before a write. An
// informer's lag cannot be produced on demand, so tests of the reads that
// must not trust a lagging cache use such a copy. Tests only.
package cachetest

import (
	"context"
	"reflect"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Stale is a client whose reads of one object (Copy's kind, namespace and
// name) return Copy; everything else is Client's. Copy may be changed, or
// filled later, through the pointer it holds: a Copy whose name matches no
// read stands for a cache that has caught up.
type Stale struct {
	client.Client
	Copy client.Object
}

var _ client.Client = Stale{}

// Get returns a deep copy of Copy for its key and type, or reads Client.
func (s Stale) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if s.Copy != nil && key == client.ObjectKeyFromObject(s.Copy) && reflect.TypeOf(obj) == reflect.TypeOf(s.Copy) {
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(s.Copy.DeepCopyObject()).Elem())
		return nil
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// Counting is a reader that counts its Gets (the reads of the API
// server a test expects, or expects none of).
type Counting struct {
	client.Reader
	Gets *int
}

var _ client.Reader = Counting{}

// Get counts the read and reads Reader.
func (c Counting) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	*c.Gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}
