// Package jsonform gives Go data the form encoding/json's Marshal then
// Unmarshal gives it (JSON's types: numbers as float64, or as json.Number
// with a Decoder's UseNumber), without writing the text: the planner and
// the render caches read instances as a lockfile would give them, a
// thousand times a plan.
package jsonform
