package resolver

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"time"

	"cuelang.org/go/cue/token"
)

// GateReady is the only gate of a wave: every instance of the wave before
// succeeded and its deployment is Ready.
const GateReady = "ready"

// MaxWaves bounds the waves of one fan-out (a count, or what a percentage
// comes to).
const MaxWaves = 100

// RolloutSettings is the rollout block of styrmin.cue (every cluster's
// fan-outs) or of environment.cue (that environment's share of them).
type RolloutSettings struct {
	// Waves is a count (an int) or the share of the fan-out each wave
	// takes ("10%").
	Waves any `json:"waves,omitempty"`
	// Gate is what lets the next wave start; "ready" (the default).
	Gate string `json:"gate,omitempty"`
	// Pause is how long the next wave waits after the gate opened, a Go
	// duration ("30s").
	Pause string `json:"pause,omitempty"`
	// Order, in styrmin.cue only, runs each cluster's fan-out environment
	// by environment in this order (dev → staging → prod); environments
	// left out follow, by name.
	Order []string `json:"order,omitempty"`
}

var percentRE = regexp.MustCompile(`^([0-9]{1,3})%$`)

// waveSplit is a parsed waves setting: a count, or a percentage.
type waveSplit struct {
	count, percent int
}

// split returns the sizes of the waves n instances make.
func (w waveSplit) split(n int) []int {
	if n == 0 {
		return nil
	}
	k := 1
	switch {
	case w.count > 0:
		k = min(w.count, n)
	case w.percent > 0:
		size := max(1, int(math.Ceil(float64(n)*float64(w.percent)/100)))
		k = (n + size - 1) / size
		sizes := make([]int, 0, k)
		for left := n; left > 0; left -= size {
			sizes = append(sizes, min(size, left))
		}
		return sizes
	}
	sizes := make([]int, k)
	for i := range sizes {
		sizes[i] = n / k
		if i < n%k {
			sizes[i]++
		}
	}
	return sizes
}

// parsedRollout is a checked RolloutSettings.
type parsedRollout struct {
	waves waveSplit
	pause string
	order []string
}

// checkRollout checks a rollout block of file: every problem names the
// field and what was expected. envs lists the environments order may
// name (nil: order is not allowed in this file).
func checkRollout(file string, r *RolloutSettings, envs map[string]bool) (*parsedRollout, error) {
	if r == nil {
		return nil, nil
	}
	bad := func(field, format string, args ...any) error {
		return &ConfigError{File: file, Field: "rollout." + field, Msg: fmt.Sprintf(format, args...)}
	}
	p := &parsedRollout{pause: r.Pause}
	waves := r.Waves
	switch w := waves.(type) {
	case int:
		waves = float64(w)
	case int64:
		waves = float64(w)
	case json.Number:
		waves, _ = w.Float64()
	}
	switch w := waves.(type) {
	case nil:
	case float64:
		if w != math.Trunc(w) || w < 1 || w > MaxWaves {
			return nil, bad("waves", "%v: expected a whole number of waves from 1 to %d, or a share such as \"10%%\"", w, MaxWaves)
		}
		p.waves.count = int(w)
	case string:
		m := percentRE.FindStringSubmatch(w)
		pct := 0
		if m != nil {
			pct, _ = strconv.Atoi(m[1])
		}
		if pct < 1 || pct > 100 {
			return nil, bad("waves", "%q: expected a share of the fan-out from \"1%%\" to \"100%%\", or a number of waves", w)
		}
		p.waves.percent = pct
	default:
		return nil, bad("waves", "expected a number of waves or a share such as \"10%%\"")
	}
	if r.Gate != "" && r.Gate != GateReady {
		return nil, bad("gate", "%q: expected %q (the wave before succeeded and is Ready)", r.Gate, GateReady)
	}
	if r.Pause != "" {
		d, err := time.ParseDuration(r.Pause)
		if err != nil || d < 0 || d > 24*time.Hour {
			return nil, bad("pause", "%q: expected a duration from 0s to 24h (for example \"30s\")", r.Pause)
		}
	}
	if len(r.Order) > 0 && envs == nil {
		return nil, bad("order", "the environment order is a repository setting: set it in styrmin.cue")
	}
	seen := map[string]bool{}
	for i, e := range r.Order {
		switch {
		case seen[e]:
			return nil, bad(fmt.Sprintf("order[%d]", i), "%q is listed twice", e)
		case !envs[e]:
			return nil, bad(fmt.Sprintf("order[%d]", i), "%q: expected an environment of a cluster of this repository", e)
		}
		seen[e] = true
	}
	p.order = r.Order
	return p, nil
}

// rolloutConfig is what orderWaves needs of the repository: the
// repository's rollout and each environment's own, by cluster.
type rolloutConfig struct {
	repo *parsedRollout
	envs map[string]map[string]*parsedRollout
}

// rolloutConfigOf collects the checked rollout blocks of repo (nil when
// none is set: fan-outs are not split).
func rolloutConfigOf(repo *Repository) *rolloutConfig {
	cfg := &rolloutConfig{repo: repo.rollout, envs: map[string]map[string]*parsedRollout{}}
	set := cfg.repo != nil
	for _, c := range repo.Clusters {
		for _, e := range c.Environments {
			if e.rollout != nil {
				if cfg.envs[c.Name] == nil {
					cfg.envs[c.Name] = map[string]*parsedRollout{}
				}
				cfg.envs[c.Name][e.Name] = e.rollout
				set = true
			}
		}
	}
	if !set {
		return nil
	}
	return cfg
}

// stage is a part of a chain of waves: one setting over some changes.
type stage struct {
	setting *parsedRollout
	members []*LockChange
}

// chain is a sequence of waves, each running after the one before.
type chain struct {
	group  string
	stages []stage
}

// orderWaves splits each cluster's fan-out (the updates of two or more
// running applications in one lock) into health-gated waves: every
// instance of a wave runs after every instance of the wave before. With
// an environment order the cluster's fan-out is one chain, environment
// by environment; without one, an environment with its own rollout block
// is a chain of its own and the others share the repository's. New
// deployments (ordered by what they connect to), tombstones and internal
// deployments (ordered around their ingress) are not part of a wave, nor
// are takers (they run after the deployment an object moves from,
// orderMoves).
func orderWaves(res *Result, changes []LockChange, takers map[ID]bool) error {
	cfg := res.rollout
	if cfg == nil {
		return nil
	}
	byCluster := map[string][]*LockChange{}
	var clusters []string
	for i := range changes {
		c := &changes[i]
		if c.Next.Tombstone() || c.Previous == nil || c.Previous.Tombstone() || c.Next.Internal != "" || takers[c.ID] {
			continue
		}
		if _, ok := byCluster[c.ID.Cluster]; !ok {
			clusters = append(clusters, c.ID.Cluster)
		}
		byCluster[c.ID.Cluster] = append(byCluster[c.ID.Cluster], c)
	}
	sort.Strings(clusters)
	for _, cl := range clusters {
		ups := byCluster[cl]
		if len(ups) < 2 {
			continue
		}
		for _, ch := range cfg.chains(cl, ups) {
			ch.assign()
		}
	}
	return nil
}

// chains groups one cluster's fan-out (sorted by ID) into chains.
func (cfg *rolloutConfig) chains(cluster string, ups []*LockChange) []chain {
	envOwn := cfg.envs[cluster]
	byEnv := map[string][]*LockChange{}
	var envs []string
	for _, c := range ups {
		if _, ok := byEnv[c.ID.Environment]; !ok {
			envs = append(envs, c.ID.Environment)
		}
		byEnv[c.ID.Environment] = append(byEnv[c.ID.Environment], c)
	}
	settingOf := func(env string) *parsedRollout {
		if s := envOwn[env]; s != nil {
			return s
		}
		return cfg.repo
	}
	if cfg.repo != nil && len(cfg.repo.order) > 0 {
		ordered := slices.Clone(envs)
		rank := func(e string) int {
			if i := slices.Index(cfg.repo.order, e); i >= 0 {
				return i
			}
			return len(cfg.repo.order)
		}
		sort.SliceStable(ordered, func(i, j int) bool { return rank(ordered[i]) < rank(ordered[j]) })
		ch := chain{}
		for _, e := range ordered {
			ch.stages = append(ch.stages, stage{setting: settingOf(e), members: byEnv[e]})
		}
		return []chain{ch}
	}
	var out []chain
	shared := chain{}
	var rest []*LockChange
	for _, e := range envs {
		if envOwn[e] != nil {
			out = append(out, chain{group: e, stages: []stage{{setting: envOwn[e], members: byEnv[e]}}})
			continue
		}
		rest = append(rest, byEnv[e]...)
	}
	if cfg.repo != nil && len(rest) > 0 {
		shared.stages = []stage{{setting: cfg.repo, members: rest}}
		out = append([]chain{shared}, out...)
	}
	return out
}

// assign writes the chain's waves into its instances: Rollout, and After
// the instances of the wave before. A chain of one wave orders nothing.
func (ch chain) assign() {
	type wave struct {
		pause   string
		members []*LockChange
	}
	var waves []wave
	for _, st := range ch.stages {
		split := waveSplit{}
		pause := ""
		if st.setting != nil {
			split, pause = st.setting.waves, st.setting.pause
		}
		i := 0
		for _, size := range split.split(len(st.members)) {
			waves = append(waves, wave{pause: pause, members: st.members[i : i+size]})
			i += size
		}
	}
	if len(waves) < 2 {
		return
	}
	for w, wv := range waves {
		var before []string
		if w > 0 {
			for _, p := range waves[w-1].members {
				before = append(before, AfterRef(p.ID, p.Next.Sequence))
			}
		}
		for _, c := range wv.members {
			r := &Rollout{Wave: w + 1, Waves: len(waves), Group: ch.group}
			if w > 0 {
				r.Pause = wv.pause
			}
			c.Next.Rollout = r
			after := append(slices.Clone(c.Next.After), before...)
			slices.Sort(after)
			c.Next.After = slices.Compact(after)
		}
	}
}

// takeRollout moves a layer's rollout block out of its settings (it is
// no setting drivers see) and checks it.
func takeRollout(file string, settings map[string]any, envs map[string]bool, pos map[string]token.Position) (*parsedRollout, error) {
	r, err := takeBlock[RolloutSettings](file, settings, "rollout", pos)
	if err != nil || r == nil {
		return nil, err
	}
	return checkRollout(file, r, envs)
}
