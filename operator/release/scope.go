package release

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/styrmin/styrmin/drivers"
)

// Scopes tells the environment policy whether a rendered object's kind is
// cluster-scoped as the cluster serves it (drivers.CheckPolicyWith): the
// apply creates an object at the scope its mapping says, whatever its
// kind's name, so the policy must judge that scope.
//
// Cost: it reads the same RESTMapper as the apply (the manager's), which
// keeps every group version it has discovered, so a served kind costs no
// request once its group version is known. A kind the cluster does not
// serve costs the mapper one discovery request per lookup, as it costs
// the apply that follows; such an apply fails and the deployment retries
// with backoff. No answer is remembered here: a kind remembered as not
// served while the apply's mapping has learnt it would let an object
// through at the wrong scope.
type Scopes struct {
	mapper meta.RESTMapper
}

// NewScopes returns the scopes of mapper's cluster.
func NewScopes(mapper meta.RESTMapper) *Scopes {
	return &Scopes{mapper: mapper}
}

// ClusterScoped is a drivers.ScopeFunc: known is false when the cluster
// does not serve o's kind (the apply cannot create it either), and the
// check decides without it. Any other error is returned: the check must
// not pass an object whose scope it could not learn.
func (s *Scopes) ClusterScoped(o drivers.Object) (clusterScoped, known bool, err error) {
	if s == nil || s.mapper == nil {
		return false, false, nil
	}
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil {
		return false, false, err
	}
	m, err := s.mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: o.Kind}, gv.Version)
	if meta.IsNoMatchError(err) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return m.Scope.Name() == meta.RESTScopeNameRoot, true, nil
}
