package operator

import (
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/deployment"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/source"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/operator/webhook"
	"github.com/styrmin/styrmin/resolver"
)

// The defaults of the agent's parts, for the agent's flags: cmd/ imports
// only this facade and the API.
const (
	// DefaultPollInterval is how often the repository is fetched.
	DefaultPollInterval = source.DefaultPollInterval
	// DefaultStepTimeout bounds a task step whose driver declares none.
	DefaultStepTimeout = task.DefaultStepTimeout
	// DefaultKeepTasks is how many finished tasks a deployment keeps.
	DefaultKeepTasks = task.DefaultKeepTasks
	// DefaultDriftInterval is how often each deployment is checked for
	// drift.
	DefaultDriftInterval = deployment.DefaultDriftInterval
	// DefaultWebhookSecretKey is the key of the webhook Secret holding the
	// shared secret.
	DefaultWebhookSecretKey = webhook.DefaultSecretKey
)

// TaskOptions tune the task controller (see task.Options).
type TaskOptions = task.Options

// LockModeOptions configure the agent's lock mode (see
// source.LockModeOptions).
type LockModeOptions = source.LockModeOptions

// DeploymentID is the API's form of a deployment's identity (see
// instance.DeploymentID): the one conversion, for the CLI too.
func DeploymentID(id resolver.ID) v1alpha1.DeploymentID { return instance.DeploymentID(id) }
