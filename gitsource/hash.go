package gitsource

import (
	"encoding/hex"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
)

// Hash is a git object name (SHA-1). The zero Hash means "no commit": an
// unborn branch, or "from the root" for LockChanges.
type Hash [20]byte

// ParseHash parses the 40 hexadecimal digits of a full object name. Unlike
// go-git's plumbing.NewHash it rejects anything else, so a corrupted value
// read from a status field is an error, not a silently different hash.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*len(h) {
		return Hash{}, fmt.Errorf("gitsource: parse hash %q: want %d hexadecimal digits, got %d characters", s, 2*len(h), len(s))
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return Hash{}, fmt.Errorf("gitsource: parse hash %q: %w", s, err)
	}
	return h, nil
}

// String returns the 40 lowercase hexadecimal digits of h.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// Short returns the first 12 hexadecimal digits, for messages.
func (h Hash) Short() string { return h.String()[:12] }

// IsZero reports whether h is the zero Hash.
func (h Hash) IsZero() bool { return h == Hash{} }

// MarshalText encodes h as its hexadecimal digits; the zero Hash encodes as
// the empty string so that it round-trips through optional JSON fields.
func (h Hash) MarshalText() ([]byte, error) {
	if h.IsZero() {
		return []byte{}, nil
	}
	return []byte(h.String()), nil
}

// UnmarshalText is the inverse of MarshalText.
func (h *Hash) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*h = Hash{}
		return nil
	}
	p, err := ParseHash(string(b))
	if err != nil {
		return err
	}
	*h = p
	return nil
}

func fromPlumbing(h plumbing.Hash) Hash { return Hash(h) }

func (h Hash) plumbing() plumbing.Hash { return plumbing.Hash(h) }
