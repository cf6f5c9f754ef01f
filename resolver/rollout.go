package resolver

// orderWaves splits a fan-out into health-gated waves.
func orderWaves(res *Result, changes []LockChange) error { return nil }
