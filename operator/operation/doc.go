// Package operation owns the environment operations of the agent:
// StyrminBackup and StyrminRestore (validate, make one operation task per
// deployment, record the result) and the backup schedules and retention
// that environments declare in git. The tasks themselves run in package
// task, ordered with the deployments' other tasks.
package operation
