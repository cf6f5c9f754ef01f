// Package metricsreg registers the agent's Prometheus collectors once per
// process: a second controller manager in one process (tests build
// several) shares the collectors the first registered.
package metricsreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c, or returns the collector already registered under
// the same name.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// ResultLabel is the "result" label of an operation: "success" or
// "error".
func ResultLabel(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}
