package drivers

import "fmt"

// Helm's release records are Secrets of this type, labelled owner=helm
// (with name, status and version). The agent keeps its releases in that
// format, so `helm list` and `helm history` read them.
const (
	helmRecordType  = "helm.sh/release.v1"
	helmRecordOwner = "helm"
)

// releaseRecordShape says why o looks like a Helm release record, "" when
// it does not. A chart must never render one: the agent would apply it
// next to the real records, where Helm (which selects records by the
// owner=helm label alone in `helm list`) and a careless reader would take
// it for a revision, and a planted revision's manifest is what drift
// correction and uninstall act on.
func releaseRecordShape(o *rendered) string {
	if o.kind() != "Secret" || group(o.apiVersion()) != "" {
		return ""
	}
	if t, _ := o.obj["type"].(string); t == helmRecordType {
		return fmt.Sprintf("is of type %s, the type of Helm's release records", helmRecordType)
	}
	if owner, _ := o.labels()["owner"].(string); owner == helmRecordOwner {
		return "is labelled owner=helm, the label Helm finds its release records by"
	}
	return ""
}

// refuseReleaseRecords refuses a rendered Secret in the shape of a Helm
// release record (see releaseRecordShape), naming its template.
func refuseReleaseRecords(objs []*rendered) error {
	for _, o := range objs {
		if why := releaseRecordShape(o); why != "" {
			return &SpecError{File: o.source, Msg: fmt.Sprintf("Secret %s/%s %s; a chart may not render a release record (remove the type or the label)", o.namespace(), o.name(), why)}
		}
	}
	return nil
}
