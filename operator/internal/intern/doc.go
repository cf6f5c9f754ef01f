// Package intern shares the strings that repeat across the objects the
// agent caches. A decoded object holds a copy of every string it carries,
// and most of a StyrminDeployment's or a task's strings are the same in
// every one of them (its kind and API version, label keys, condition
// types, reasons and messages, the driver's name and digest, the lock
// commit): the copies were a fifth of a cached StyrminDeployment
// (BenchmarkCachedDeploymentsRetain). A Table keeps one copy of each and a
// cache transform (Table.Transform) points each object's strings at it.
package intern
