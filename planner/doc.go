// Package planner owns plans: the difference between the locked instances
// at a base revision and the instances the head configuration resolves to,
// the workflow each difference selects, the layer that caused it (fan-out
// attribution) and the plan's renderers (text, markdown, JSON). It writes
// nothing.
//
// Compute builds the model (Plan) from an Input: the base's lockfiles, the
// head's resolution (resolved with those lockfiles, so the driver selection
// rule sees them), the head configuration and the driver catalogs of both
// sides. For every deployment that gets a new instance it records the
// workflow (create, update, upgrade, delete, as the agent will choose it),
// the sequence locking will assign, a path-level diff of context and
// values, the driver actions the workflow runs, the rendered-manifest diff
// and the causes; for the plan as a whole, the blast radius per
// environment, the deployments a fan-out leaves out because they set the
// changed value themselves, and the deletion safety rail.
//
// ComputeTrees is the whole pipeline from two folders of the repository
// (the base commit's tree and the head's, read by the caller, typically
// with gitsource): it loads the base's lockfiles and drivers and the
// head's configuration and drivers, resolves the head against the base's
// lockfiles and calls Compute.
//
// No plan holds a secret: secret parameters are references, and both
// sides of a plan are rendered from instances that hold placeholders where
// sensitive values were (resolver.Placeholder; a lock written while a
// value was in clear is shown from a copy with placeholders,
// resolver.WithPlaceholders), so no transformed form of a value (upper
// case, base64, URL encoding, a short value inside other text) can reach
// the output. The maskers then show the placeholders as "(sensitive)" and
// "(sensitive, changed)", and the data of Secret objects is redacted.
//
// Render (RenderText, RenderMarkdown, RenderJSON) prints a Plan; the JSON
// form is versioned (SchemaVersion) and described by JSONSchema and
// docs/plan-json.md.
package planner
