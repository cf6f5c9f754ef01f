// Package drivers owns application drivers: the driver spec and its CUE schema,
// loading a driver version from a folder (fs.FS), the version catalog and the
// selection rule, and rendering a chart from a resolved context (Helm engine,
// then Kustomize post-render patches). It knows nothing about git remotes,
// clusters or tasks.
package drivers
