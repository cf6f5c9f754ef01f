package testcluster

import (
	"errors"
	"fmt"
	"net"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after
// stopTimeout) and leaves etcd and the workload components running, as a
// control plane upgrade or a crashed API server does: clients get refused
// connections until StartAPIServer. Stopping a stopped server does
// nothing.
func (c *Cluster) StopAPIServer() error {
	api, err := c.apiServer()
	if err != nil {
		return err
	}
	// With clients connected (watches, an agent), kube-apiserver stops
	// listening at once but often does not exit within stopTimeout;
	// envtest then SIGKILLs it, as a kubelet would, and returns an error
	// that is not worth failing for. It does not wait for the killed
	// process: the stop is done when nothing answers on the port, so
	// StartAPIServer can listen there again.
	stopErr := api.Stop()
	if err := c.waitPortClosed(api.SecureServing.ListenAddr.HostPort(), stopTimeout); err != nil {
		return errors.Join(err, stopErr)
	}
	return nil
}

// waitPortClosed waits until nothing accepts connections on addr.
func (c *Cluster) waitPortClosed(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil
		}
		_ = conn.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("testcluster: kube-apiserver still answers on %s after it was stopped", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
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

// RestartAPIServer stops kube-apiserver and starts it again down after the
// stop began (it stops listening at once, however long it takes to exit),
// for the outage a test wants; see StopAPIServer and StartAPIServer.
func (c *Cluster) RestartAPIServer(down time.Duration) error {
	begin := time.Now()
	if err := c.StopAPIServer(); err != nil {
		return err
	}
	time.Sleep(time.Until(begin.Add(down)))
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
