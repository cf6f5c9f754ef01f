//go:build !unix

package resolver

func cpuTime() int64 { return 0 }
