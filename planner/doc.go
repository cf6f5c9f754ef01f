// Package planner owns plans: the difference between two instances, the
// workflow it selects, the layer that caused it (fan-out attribution) and the
// plan's renderers (text, markdown, JSON). It writes nothing.
package planner
