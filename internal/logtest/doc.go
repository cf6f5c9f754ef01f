// Package logtest captures what code under test logs through logr, its
// errors apart from its other lines, for tests that pin what is logged
// and how often.
package logtest
