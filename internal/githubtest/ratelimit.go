package githubtest

import (
	"fmt"
	"net/http"
	"time"
)

// RateLimit is one way GitHub refuses a request for a rate limit.
type RateLimit struct {
	// Name says which.
	Name string
	// Answer writes GitHub's answer.
	Answer func(w http.ResponseWriter)
	// Wait is how long a client should wait before it asks again (a
	// minute when the answer names no time, as GitHub advises).
	Wait time.Duration
}

// RateLimits are GitHub's three rate-limit answers: a 429 with
// Retry-After, a 403 once the hour's requests are spent (its reset 20
// minutes after now, read against the real clock), and a 403 of the
// secondary limit that names no time.
func RateLimits() []RateLimit {
	return []RateLimit{
		{"429 with Retry-After", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "120")
			http.Error(w, `{"message":"Too many requests"}`, http.StatusTooManyRequests)
		}, 2 * time.Minute},
		{"403 with the hour's limit spent", func(w http.ResponseWriter) {
			w.Header().Set("X-Ratelimit-Remaining", "0")
			w.Header().Set("X-Ratelimit-Reset", fmt.Sprint(time.Now().Add(20*time.Minute).Unix()))
			http.Error(w, `{"message":"API rate limit exceeded for installation ID 42."}`, http.StatusForbidden)
		}, 20 * time.Minute},
		{"403 of the secondary limit, no time named", func(w http.ResponseWriter) {
			http.Error(w, `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`, http.StatusForbidden)
		}, time.Minute},
	}
}
