package resolver

// orderIngress orders the changes around each environment's ingress
// controller (internal deployments).
func orderIngress(res *Result, current map[ID]*Instance, changes []LockChange) {}
