package resolver

import (
	"crypto/sha256"
	"sync"

	"cuelang.org/go/cue/token"
)

// parseMemo remembers the files a Loader (and its forks) evaluated, by
// content: a repository's deployment files are often the same text (the
// same application in every environment), and each is a CUE evaluation
// against the schema. Only files decoded into a map without error are
// remembered; the positions are the first file's, renamed for the next.
type parseMemo struct {
	mu sync.Mutex
	m  map[parseKey]parsed
}

type parseKey struct {
	def, ext string
	sum      [sha256.Size]byte
}

type parsed struct {
	value map[string]any
	pos   map[string]token.Position
}

// maxParseMemo bounds what one Loader remembers.
const maxParseMemo = 8192

func (pm *parseMemo) get(k parseKey, file string) (map[string]any, map[string]token.Position, bool) {
	pm.mu.Lock()
	p, ok := pm.m[k]
	pm.mu.Unlock()
	if !ok {
		return nil, nil, false
	}
	pos := make(map[string]token.Position, len(p.pos))
	for f, at := range p.pos {
		at.Filename = file
		pos[f] = at
	}
	return deepCopy(p.value).(map[string]any), pos, true
}

func (pm *parseMemo) put(k parseKey, value map[string]any, pos map[string]token.Position) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	if pm.m == nil {
		pm.m = map[parseKey]parsed{}
	}
	if len(pm.m) < maxParseMemo {
		kept := make(map[string]token.Position, len(pos))
		for f, at := range pos {
			kept[f] = at
		}
		pm.m[k] = parsed{value: deepCopy(value).(map[string]any), pos: kept}
	}
}
