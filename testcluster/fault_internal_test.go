package testcluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// faultStage is the part of a kwok Stage that the checks below read.
type faultStage struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		ResourceRef struct {
			Kind string `json:"kind"`
		} `json:"resourceRef"`
		Selector struct {
			MatchExpressions []struct {
				Key      string   `json:"key"`
				Operator string   `json:"operator"`
				Values   []string `json:"values"`
			} `json:"matchExpressions"`
		} `json:"selector"`
		Weight int `json:"weight"`
		Next   struct {
			StatusTemplate string `json:"statusTemplate"`
		} `json:"next"`
	} `json:"spec"`
}

func readFaultStages(t *testing.T) []faultStage {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "hack", "testcluster", "fault-stages.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var stages []faultStage
	for {
		var s faultStage
		if err := dec.Decode(&s); errors.Is(err, io.EOF) {
			return stages
		} else if err != nil {
			t.Fatal(err)
		}
		stages = append(stages, s)
	}
}

// TestFaultStagesWinAndExcludeEachOther checks, without a cluster, what the
// precedence rests on: every fault stage has a weight (kwok's defaults have
// none, so a weighted stage always wins), keys on FaultAnnotation, leaves a
// pod being deleted to pod-delete, and no two fault stages match the same
// pod (kwok would then pick one at random).
func TestFaultStagesWinAndExcludeEachOther(t *testing.T) {
	stages := readFaultStages(t)
	annotationKey := fmt.Sprintf(".metadata.annotations[%q]", FaultAnnotation)
	matched := map[string]string{} // "value/phase" -> stage name
	templates := ""
	for _, s := range stages {
		name := s.Metadata.Name
		if s.Kind != "Stage" || s.Spec.ResourceRef.Kind != "Pod" {
			t.Errorf("stage %q: kind %q for %q, want a Stage for Pods", name, s.Kind, s.Spec.ResourceRef.Kind)
		}
		if s.Spec.Weight <= 0 {
			t.Errorf("stage %s: weight %d, want > 0 to win over kwok's defaults", name, s.Spec.Weight)
		}
		var values, phases []string
		notDeleting := false
		for _, e := range s.Spec.Selector.MatchExpressions {
			switch {
			case e.Key == annotationKey && e.Operator == "In":
				values = e.Values
			case e.Key == ".status.phase" && e.Operator == "In":
				phases = e.Values
			case e.Key == ".metadata.deletionTimestamp" && e.Operator == "DoesNotExist":
				notDeleting = true
			}
		}
		if !notDeleting {
			t.Errorf("stage %s matches pods being deleted: pod-delete must stay the only stage for them", name)
		}
		if len(values) == 0 || len(phases) == 0 {
			t.Errorf("stage %s: selects annotation values %v and phases %v, want both", name, values, phases)
		}
		for _, v := range values {
			for _, p := range phases {
				if other, ok := matched[v+"/"+p]; ok {
					t.Errorf("stages %s and %s both match %s pods in phase %s", other, name, v, p)
				}
				matched[v+"/"+p] = name
			}
		}
		templates += s.Spec.Next.StatusTemplate
	}
	var got []string
	for k := range matched {
		got = append(got, k)
	}
	slices.Sort(got)
	want := []string{
		FaultCrashLoop + "/Pending", FaultCrashLoop + "/Running",
		FaultFail + "/Running",
		FaultUnready + "/Pending", FaultUnready + "/Running",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("fault stages match (value/phase) %v, want %v", got, want)
	}
	for _, s := range []string{
		fmt.Sprintf("message: %q", FaultMessage),
		fmt.Sprintf("message: %q", CrashLoopMessage),
		fmt.Sprintf("restartCount: %d", CrashLoopRestarts),
	} {
		if !strings.Contains(templates, s) {
			t.Errorf("no fault stage template writes %s", s)
		}
	}
}
