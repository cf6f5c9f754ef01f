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
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/styrmin/styrmin/operator/internal/metricsreg"
)

// DefaultMaxBody is the largest payload accepted by default. GitHub caps
// payloads at 25 MB; a push of lockfiles is far smaller.
const DefaultMaxBody = 1 << 20

// DefaultMaxInFlight is how many requests may be read and verified at
// once by default. Until its signature is checked a request is anyone's,
// so this, times MaxBody, bounds the memory strangers can hold.
const DefaultMaxInFlight = 32

// DefaultBodyTimeout is how long a request may take to send its body by
// default. GitHub sends a delivery at once; a sender trickling bytes is
// cut off at this point.
const DefaultBodyTimeout = 5 * time.Second

// DefaultSlowAfter is how long a request may read and verify its body
// before a new request, finding every slot taken, may cut it off to take
// its place.
const DefaultSlowAfter = time.Second

// DefaultReplayWindow is how long a delivery is remembered by default.
const DefaultReplayWindow = 24 * time.Hour

// DefaultReplayBytes bounds the memory of remembered deliveries by default
// (about 5000 deliveries of GitHub's 36-byte ids).
const DefaultReplayBytes = 1 << 20

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
	// Repo is the tracked repository's remote URL (the agent's --url);
	// pushes that name another repository are ignored. An organisation's
	// webhook, or a secret shared by several repositories, sends pushes
	// of every repository: one to a branch of the same name is not a
	// change of this one. A remote that names no repository a push can
	// be compared with (a plain path, a host a git host would not
	// announce; see parseRepository) or "" checks nothing, as before.
	Repo string
	// OnPush is called for a verified, new push to the tracked branch. It
	// records the request (the agent annotates its StyrminSource) and must
	// return quickly; an error answers 503 and forgets the delivery, so
	// GitHub's redelivery of it is accepted.
	OnPush func(context.Context, Event) error
	// MaxBody bounds the body (0: DefaultMaxBody).
	MaxBody int64
	// MaxInFlight bounds the requests read and verified at once (0:
	// DefaultMaxInFlight); the excess is answered 503 at once.
	MaxInFlight int
	// BodyTimeout bounds the time to receive a body (0:
	// DefaultBodyTimeout). It needs the request's connection to support
	// read deadlines (net/http's server does).
	BodyTimeout time.Duration
	// SlowAfter is how long a request may read and verify its body before a new one
	// may cut it off when every slot is taken (0: DefaultSlowAfter).
	SlowAfter time.Duration
	// ReplayWindow is how long a delivery's id and body hash are
	// remembered (0: DefaultReplayWindow).
	ReplayWindow time.Duration
	// ReplayBytes bounds the memory they take (0: DefaultReplayBytes); past
	// it the oldest are forgotten first.
	ReplayBytes int
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
	// Log receives one line per request, never the payload.
	Log logr.Logger
	// Registerer receives the deliveries metric (nil: controller-runtime's
	// registry, served on the manager's metrics endpoint).
	Registerer prometheus.Registerer
}

// Handler serves GitHub webhooks.
type Handler struct {
	opts Options
	// repo is Options.Repo parsed; checkRepo is false when it names none.
	repo       repository
	checkRepo  bool
	slots      *slots
	seen       *deliveries
	deliveries *prometheus.CounterVec
	// secretErr is the text of the secret's failure last logged as an
	// error (nil while it is read): a Secret that stays missing is logged
	// once, not at every delivery anyone sends.
	secretErr atomic.Pointer[string]
}

// secretFailed logs that the secret could not be had: as an error when
// the failure is new, else at V(1).
func (h *Handler) secretFailed(log logr.Logger, err error) {
	if err == nil {
		err = errors.New("the webhook secret is empty")
	}
	msg := err.Error()
	if prev := h.secretErr.Swap(&msg); prev != nil && *prev == msg {
		log.V(1).Info("webhook rejected: no secret configured", "error", msg)
		return
	}
	log.Error(err, "webhook rejected: no secret configured; every delivery is answered 503 until it can be read (logged again when the error changes)")
}

// secretRead notes that the secret was had, saying so after a failure.
func (h *Handler) secretRead(log logr.Logger) {
	if h.secretErr.Load() != nil && h.secretErr.Swap(nil) != nil {
		log.Info("webhook secret read: deliveries are verified again")
	}
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
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.SlowAfter <= 0 {
		opts.SlowAfter = DefaultSlowAfter
	}
	if opts.ReplayWindow <= 0 {
		opts.ReplayWindow = DefaultReplayWindow
	}
	if opts.ReplayBytes <= 0 {
		opts.ReplayBytes = DefaultReplayBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.OnPush == nil {
		opts.OnPush = func(context.Context, Event) error { return nil }
	}
	if opts.Registerer == nil {
		opts.Registerer = crmetrics.Registry
	}
	deliveries, err := metricsreg.Register(opts.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "styrmin_webhook_deliveries_total",
		Help: "Webhook deliveries received, by result (accepted, ignored, ping, bad_signature, replayed, too_large, busy, …).",
	}, []string{"result"}))
	if err != nil {
		return nil, err
	}
	// Every result from the start, so rate() and alerts see a zero
	// rather than no series.
	for _, r := range results {
		deliveries.WithLabelValues(string(r))
	}
	repo, checkRepo := parseRepository(opts.Repo)
	return &Handler{
		opts:       opts,
		repo:       repo,
		checkRepo:  checkRepo,
		slots:      newSlots(opts.MaxInFlight),
		seen:       newDeliveries(opts.ReplayWindow, opts.ReplayBytes),
		deliveries: deliveries,
	}, nil
}

// ServeHTTP verifies and dispatches one delivery. Everything that costs
// memory or time before the signature is checked is bounded: a slot of
// MaxInFlight, MaxBody bytes, BodyTimeout.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.deliveries.WithLabelValues(string(h.serve(w, r))).Inc()
}

// serve answers one delivery and says how (the metric's result).
func (h *Handler) serve(w http.ResponseWriter, r *http.Request) Result {
	event := r.Header.Get("X-GitHub-Event")
	delivery := r.Header.Get("X-GitHub-Delivery")
	log := h.opts.Log.WithValues("event", event, "delivery", delivery, "remote", r.RemoteAddr)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "only POST", http.StatusMethodNotAllowed)
		return ResultMethodNotAllowed
	}
	// Cheap refusals first: none of them reads the body.
	if delivery == "" || len(delivery) > 128 {
		log.Info("webhook rejected: no usable X-GitHub-Delivery")
		http.Error(w, "X-GitHub-Delivery is required (at most 128 bytes)", http.StatusBadRequest)
		return ResultBadRequest
	}
	form, err := formEncoded(r.Header.Get("Content-Type"))
	if err != nil {
		log.Info("webhook rejected: " + err.Error())
		http.Error(w, err.Error(), http.StatusUnsupportedMediaType)
		return ResultUnsupportedMediaType
	}
	// Nothing signed, nothing to verify: refused before the body or the
	// secret (an API read) is, so a stranger's unsigned POST costs neither.
	if _, err := parseSignature(r.Header.Get("X-Hub-Signature-256")); err != nil {
		log.Info("webhook rejected: " + err.Error())
		http.Error(w, "signature mismatch", http.StatusUnauthorized)
		return ResultBadSignature
	}
	if r.ContentLength > h.opts.MaxBody {
		log.Info("webhook rejected: body too large", "bytes", r.ContentLength)
		http.Error(w, "payload too large", http.StatusRequestEntityTooLarge)
		return ResultTooLarge
	}
	// The slot is held until the body is verified or refused, not only
	// while it is read: an unverified body waiting for the secret (an API
	// read, slow or failing) is as much memory as one being read. An
	// evicted request stops reading and stops waiting for the secret.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	rc := http.NewResponseController(w)
	release, ok := h.slots.acquire(time.Now(), h.opts.SlowAfter, func() {
		// Cut a slow sender off: its pending read fails at once.
		_ = rc.SetReadDeadline(time.Unix(1, 0))
		cancel()
	})
	if !ok {
		log.Info("webhook rejected: " + errBusy.Error())
		w.Header().Set("Retry-After", "1")
		http.Error(w, errBusy.Error(), http.StatusServiceUnavailable)
		return ResultBusy
	}
	defer release()
	body, status, err := h.readBody(rc, r)
	if err != nil {
		log.Info("webhook rejected: " + err.Error())
		http.Error(w, err.Error(), status)
		return readResult(status)
	}
	secret, err := h.opts.Secret(ctx)
	if ctx.Err() != nil && r.Context().Err() == nil {
		log.Info("webhook rejected: evicted while the secret was read")
		w.Header().Set("Retry-After", "1")
		http.Error(w, errBusy.Error(), http.StatusServiceUnavailable)
		return ResultBusy
	}
	if err != nil || len(secret) == 0 {
		h.secretFailed(log, err)
		http.Error(w, "webhook secret unavailable", http.StatusServiceUnavailable)
		return ResultNoSecret
	}
	h.secretRead(log)
	if err := Verify(secret, body, r.Header.Get("X-Hub-Signature-256")); err != nil {
		log.Info("webhook rejected: " + err.Error())
		http.Error(w, "signature mismatch", http.StatusUnauthorized)
		return ResultBadSignature
	}
	release() // verified: what follows is bounded by GitHub, not by strangers
	// Only a verified delivery is remembered, so a forged one never burns
	// the id or body of the genuine one. The body hash catches a capture
	// replayed under a new id: the id is not covered by the signature.
	sum := sha256.Sum256(body)
	if dup := h.seen.add(delivery, sum, h.opts.Now()); dup != "" {
		log.Info("webhook refused: replayed delivery (" + dup + ")")
		http.Error(w, "delivery already processed ("+dup+")", http.StatusConflict)
		return ResultReplayed
	}
	payload := body
	if form {
		if payload, err = formPayload(body); err != nil {
			h.seen.forget(delivery, sum)
			log.Info("webhook rejected: " + err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return ResultBadRequest
		}
	}
	switch event {
	case "ping":
		fmt.Fprintln(w, "pong")
		return ResultPing
	case "push":
		p, err := ParsePush(payload)
		if err != nil {
			h.seen.forget(delivery, sum)
			log.Info("webhook rejected: " + err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return ResultBadRequest
		}
		if h.checkRepo {
			if other, ok := otherRepository(h.repo, p); ok {
				// Answered 2xx: the delivery is genuine, only not for
				// this agent, and GitHub should not show it as failed.
				log.Info("webhook ignored: push to another repository", "repository", other, "following", h.repo.String())
				w.WriteHeader(http.StatusAccepted)
				fmt.Fprintf(w, "push to repository %s ignored: this receiver follows %s\n", other, h.repo)
				return ResultIgnored
			}
		}
		if p.Ref != "refs/heads/"+h.opts.Branch {
			log.Info("webhook ignored: push to another ref", "ref", p.Ref)
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintln(w, "push to another ref ignored")
			return ResultIgnored
		}
		if err := h.opts.OnPush(r.Context(), Event{Delivery: delivery, Ref: p.Ref, After: p.After, Repo: p.Repository.FullName}); err != nil {
			// Not recorded: forget it, so a redelivery is not a replay.
			h.seen.forget(delivery, sum)
			log.Error(err, "webhook push: recording the sync request failed")
			http.Error(w, "recording the sync request failed; redeliver", http.StatusServiceUnavailable)
			return ResultError
		}
		log.Info("webhook push: sync requested", "ref", p.Ref, "after", p.After)
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintln(w, "sync requested")
		return ResultAccepted
	default:
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintln(w, "event ignored")
		return ResultIgnored
	}
}

// Result is how a delivery was answered: the result label of
// styrmin_webhook_deliveries_total.
type Result string

// The results of a delivery.
const (
	// ResultAccepted: a verified push to the branch; a sync is requested.
	ResultAccepted Result = "accepted"
	// ResultIgnored: verified, but another ref or event.
	ResultIgnored Result = "ignored"
	// ResultPing: GitHub's ping.
	ResultPing                 Result = "ping"
	ResultMethodNotAllowed     Result = "method_not_allowed"
	ResultBadRequest           Result = "bad_request"
	ResultUnsupportedMediaType Result = "unsupported_media_type"
	ResultTooLarge             Result = "too_large"
	// ResultBusy: every slot taken (503, Retry-After).
	ResultBusy Result = "busy"
	// ResultTimeout: the body did not arrive within BodyTimeout.
	ResultTimeout      Result = "timeout"
	ResultNoSecret     Result = "no_secret"
	ResultBadSignature Result = "bad_signature"
	ResultReplayed     Result = "replayed"
	// ResultError: verified, but recording the sync request failed (503).
	ResultError Result = "error"
)

// results are every Result.
var results = []Result{ResultAccepted, ResultIgnored, ResultPing, ResultMethodNotAllowed, ResultBadRequest,
	ResultUnsupportedMediaType, ResultTooLarge, ResultBusy, ResultTimeout, ResultNoSecret, ResultBadSignature,
	ResultReplayed, ResultError}

// readResult is the result of a body that could not be read, by status.
func readResult(status int) Result {
	switch status {
	case http.StatusServiceUnavailable:
		return ResultBusy
	case http.StatusRequestEntityTooLarge:
		return ResultTooLarge
	case http.StatusRequestTimeout:
		return ResultTimeout
	default:
		return ResultError
	}
}

// errBusy answers a request that found every slot taken by young ones.
var errBusy = errors.New("too many webhook requests in flight; retry")

// readBody reads the body within MaxBody and BodyTimeout (the caller
// holds a slot), and says which status a failure gets.
func (h *Handler) readBody(rc *http.ResponseController, r *http.Request) ([]byte, int, error) {
	now := time.Now()
	// A deadline on the connection, not a timer on the reader: a read
	// blocked on a silent client returns when it passes. Servers that do
	// not support it (tests with a recorder) still have MaxBody.
	if err := rc.SetReadDeadline(now.Add(h.opts.BodyTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return nil, http.StatusInternalServerError, fmt.Errorf("setting the body deadline: %w", err)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, h.opts.MaxBody+1))
	if err != nil {
		return nil, http.StatusRequestTimeout, fmt.Errorf("reading the body: %w", err)
	}
	if int64(len(body)) > h.opts.MaxBody {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("payload too large (more than %d bytes)", h.opts.MaxBody)
	}
	return body, 0, nil
}

// formEncoded tells GitHub's two content types apart: application/json
// (the payload is the body) and application/x-www-form-urlencoded, the
// default of a new webhook (the payload is the body's "payload" field).
// Either way the signature is over the raw body.
func formEncoded(contentType string) (bool, error) {
	if contentType == "" {
		return false, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false, fmt.Errorf("Content-Type %q: %w", contentType, err)
	}
	switch mt {
	case "application/json":
		return false, nil
	case "application/x-www-form-urlencoded":
		return true, nil
	}
	return false, fmt.Errorf("Content-Type %q: expected application/json or application/x-www-form-urlencoded", mt)
}

// formPayload is the "payload" field of a form-encoded delivery.
func formPayload(body []byte) ([]byte, error) {
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("form payload: %w", err)
	}
	p := v.Get("payload")
	if p == "" {
		return nil, errors.New(`form payload: field "payload" is missing or empty`)
	}
	return []byte(p), nil
}

// Verify checks a GitHub X-Hub-Signature-256 header ("sha256=<hex>")
// against the body in constant time.
func Verify(secret, body []byte, header string) error {
	got, err := parseSignature(header)
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return errors.New("X-Hub-Signature-256 does not match the body")
	}
	return nil
}

// parseSignature is the MAC an X-Hub-Signature-256 header carries; an
// error says what is wrong with the header.
func parseSignature(header string) ([]byte, error) {
	if header == "" {
		return nil, errors.New("missing X-Hub-Signature-256")
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return nil, errors.New("X-Hub-Signature-256: expected sha256=<hex>")
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return nil, errors.New("X-Hub-Signature-256: expected 64 hex digits")
	}
	return got, nil
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
		CloneURL string `json:"clone_url"`
		SSHURL   string `json:"ssh_url"`
		HTMLURL  string `json:"html_url"`
		GitURL   string `json:"git_url"`
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
