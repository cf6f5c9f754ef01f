package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/go-logr/logr"
)

// DefaultMaxBody is the largest payload accepted by default. GitHub caps
// payloads at 25 MB; a push of lockfiles is far smaller.
const DefaultMaxBody = 1 << 20

// DefaultReplayMemory is how many delivery ids are remembered.
const DefaultReplayMemory = 4096

// SecretFunc returns the shared webhook secret (for example from a
// Kubernetes Secret). It is called per request, so a rotated secret takes
// effect at once.
type SecretFunc func(ctx context.Context) ([]byte, error)

// Event is what a verified push tells the agent.
type Event struct {
	Delivery string
	Ref      string
	After    string
	Repo     string
}

// Options configures the handler.
type Options struct {
	// Secret returns the shared secret; required.
	Secret SecretFunc
	// Branch is the tracked branch; pushes to other refs are ignored.
	Branch string
	// OnPush is called for a verified push to the tracked branch; it must
	// not block (trigger a sync, do not run it).
	OnPush func(Event)
	// MaxBody bounds the body (0: DefaultMaxBody).
	MaxBody int64
	// ReplayMemory bounds the remembered delivery ids (0: default).
	ReplayMemory int
	// Log receives one line per request, never the payload.
	Log logr.Logger
}

// Handler serves GitHub webhooks.
type Handler struct {
	opts Options
	seen *deliveries
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a webhook handler.
func NewHandler(opts Options) (*Handler, error) {
	if opts.Secret == nil {
		return nil, errors.New("webhook: Options.Secret is required")
	}
	if opts.Branch == "" {
		return nil, errors.New("webhook: Options.Branch is required")
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.ReplayMemory <= 0 {
		opts.ReplayMemory = DefaultReplayMemory
	}
	if opts.OnPush == nil {
		opts.OnPush = func(Event) {}
	}
	return &Handler{opts: opts, seen: newDeliveries(opts.ReplayMemory)}, nil
}

// ServeHTTP verifies and dispatches one delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	event := r.Header.Get("X-GitHub-Event")
	delivery := r.Header.Get("X-GitHub-Delivery")
	log := h.opts.Log.WithValues("event", event, "delivery", delivery, "remote", r.RemoteAddr)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "only POST", http.StatusMethodNotAllowed)
		return
	}
	if r.ContentLength > h.opts.MaxBody {
		log.Info("webhook rejected: body too large", "bytes", r.ContentLength)
		http.Error(w, "payload too large", http.StatusRequestEntityTooLarge)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, h.opts.MaxBody+1))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	if int64(len(body)) > h.opts.MaxBody {
		log.Info("webhook rejected: body too large", "bytes", ">"+fmt.Sprint(h.opts.MaxBody))
		http.Error(w, "payload too large", http.StatusRequestEntityTooLarge)
		return
	}
	secret, err := h.opts.Secret(r.Context())
	if err != nil || len(secret) == 0 {
		log.Error(err, "webhook rejected: no secret configured")
		http.Error(w, "webhook secret unavailable", http.StatusServiceUnavailable)
		return
	}
	if err := Verify(secret, body, r.Header.Get("X-Hub-Signature-256")); err != nil {
		log.Info("webhook rejected: " + err.Error())
		http.Error(w, "signature mismatch", http.StatusUnauthorized)
		return
	}
	if delivery != "" && !h.seen.add(delivery) {
		log.Info("webhook ignored: delivery already processed")
		fmt.Fprintln(w, "duplicate delivery ignored")
		return
	}
	switch event {
	case "ping":
		fmt.Fprintln(w, "pong")
	case "push":
		p, err := ParsePush(body)
		if err != nil {
			log.Info("webhook rejected: " + err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if p.Ref != "refs/heads/"+h.opts.Branch {
			log.Info("webhook ignored: push to another ref", "ref", p.Ref)
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintln(w, "push to another ref ignored")
			return
		}
		log.Info("webhook push: sync triggered", "ref", p.Ref, "after", p.After)
		h.opts.OnPush(Event{Delivery: delivery, Ref: p.Ref, After: p.After, Repo: p.Repository.FullName})
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintln(w, "sync triggered")
	default:
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintln(w, "event ignored")
	}
}

// Verify checks a GitHub X-Hub-Signature-256 header ("sha256=<hex>")
// against the body in constant time.
func Verify(secret, body []byte, header string) error {
	if header == "" {
		return errors.New("missing X-Hub-Signature-256")
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return errors.New("X-Hub-Signature-256: expected sha256=<hex>")
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return errors.New("X-Hub-Signature-256: expected 64 hex digits")
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return errors.New("X-Hub-Signature-256 does not match the body")
	}
	return nil
}

// Sign returns the X-Hub-Signature-256 value of body, as GitHub sends it.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Push is the part of a push event the agent reads.
type Push struct {
	Ref        string `json:"ref"`
	After      string `json:"after"`
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
}

// ParsePush decodes a push payload; ref is required.
func ParsePush(body []byte) (Push, error) {
	var p Push
	if err := json.Unmarshal(body, &p); err != nil {
		return p, fmt.Errorf("push payload: %w", err)
	}
	if !strings.HasPrefix(p.Ref, "refs/") {
		return p, fmt.Errorf("push payload: field ref: expected refs/…, got %q", p.Ref)
	}
	return p, nil
}

// deliveries remembers the last n delivery ids (a ring plus a set).
type deliveries struct {
	mu   sync.Mutex
	set  map[string]struct{}
	ring []string
	next int
}

func newDeliveries(n int) *deliveries {
	return &deliveries{set: make(map[string]struct{}, n), ring: make([]string, n)}
}

// add records id and reports whether it was new.
func (d *deliveries) add(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.set[id]; ok {
		return false
	}
	if old := d.ring[d.next]; old != "" {
		delete(d.set, old)
	}
	d.ring[d.next] = id
	d.set[id] = struct{}{}
	d.next = (d.next + 1) % len(d.ring)
	return true
}
