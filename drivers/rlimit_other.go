//go:build !linux

package drivers

// limitAddressSpace is a no-op outside Linux: the heap watchdog alone
// bounds the child's memory there.
func limitAddressSpace(int64) {}
