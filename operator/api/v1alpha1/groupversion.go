package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// Group is the API group of Styrmin's kinds.
const Group = "styrmin.io"

// GroupVersion is the group and version of this package's kinds.
var GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

// SchemeBuilder registers this package's kinds with a runtime.Scheme.
var SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

// AddToScheme adds this package's kinds to a scheme.
var AddToScheme = SchemeBuilder.AddToScheme
