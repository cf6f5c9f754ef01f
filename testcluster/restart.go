package testcluster

import (
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// StopAPIServer stops kube-apiserver (gracefully, killing it after
// stopTimeout) and leaves etcd and the workload components running, as a
// control plane upgrade or a crashed API server does: clients get refused
// connections until StartAPIServer. Stopping a stopped server does
// nothing.
func (c *Cluster) StopAPIServer() error {
	api, err := c.apiServer()
	if err != nil {
		return err
	}
	if err := api.Stop(); err != nil {
		return fmt.Errorf("testcluster: stopping kube-apiserver: %w", err)
	}
	return nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same address, with the same certificates, users and etcd data, so
// RESTConfig, KubeconfigPath and every object stay valid. It returns once
// the server answers its health check (within startTimeout).
func (c *Cluster) StartAPIServer() error {
	api, err := c.apiServer()
	if err != nil {
		return err
	}
	if err := api.Start(); err != nil {
		return fmt.Errorf("testcluster: starting kube-apiserver again (logs in %s): %w", c.LogDir, err)
	}
	return nil
}

// RestartAPIServer stops kube-apiserver, waits down (for the outage a test
// wants) and starts it again; see StopAPIServer and StartAPIServer.
func (c *Cluster) RestartAPIServer(down time.Duration) error {
	if err := c.StopAPIServer(); err != nil {
		return err
	}
	time.Sleep(down)
	return c.StartAPIServer()
}

// apiServer is envtest's handle of the running kube-apiserver. Its Stop
// and Start keep the secure port, the certificate folder (certificates
// already there are reused, not made anew) and the client CA, so a
// restarted server is the same server to its clients.
func (c *Cluster) apiServer() (*envtest.APIServer, error) {
	if c.env == nil || c.env.ControlPlane.APIServer == nil {
		return nil, errors.New("testcluster: the cluster has no API server")
	}
	return c.env.ControlPlane.APIServer, nil
}
