// Command clusterctl starts and stops the local Kubernetes control plane of
// the repository (package testcluster) for humans and the demo:
//
//	clusterctl up [-nodes N] [-real-node]
//	                           start it in the background, wait until ready, print how to reach it;
//	                           -real-node adds a kubelet with containerd (testcluster.RealNodeName)
//	clusterctl status          tell whether it runs and how many nodes are Ready
//	clusterctl real-node-check tell whether this machine can run the real node (exit status 1 if not, saying why)
//	clusterctl down            stop it and every process it started
//
// `up` re-executes itself as a detached supervisor (own session) that holds
// the cluster until SIGTERM. State lives in .cluster/ at the repository root:
// kubeconfig, the supervisor's pid, its log and the component logs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/styrmin/styrmin/testcluster"
)

const (
	upTimeout   = 3 * time.Minute
	downTimeout = 60 * time.Second
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	usage := func() {
		fmt.Fprintln(stderr, "usage: clusterctl up [-nodes N] [-real-node] | status | real-node-check | down")
	}
	if len(args) == 0 {
		usage()
		return 2
	}
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(stderr, "clusterctl:", err)
		return 1
	}
	root, err := testcluster.RepoRoot(wd)
	if err != nil {
		fmt.Fprintln(stderr, "clusterctl:", err)
		return 1
	}
	s := newState(root)

	fs := flag.NewFlagSet("clusterctl "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.Int("nodes", testcluster.DefaultNodes, "number of fake nodes")
	realNode := fs.Bool("real-node", false, "add a real node (a kubelet with containerd; needs root and the machine's container runtime) with the demo's images")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	switch args[0] {
	case "up":
		err = s.up(stdout, *nodes, *realNode)
	case "serve": // the detached supervisor that up starts
		err = s.serve(*nodes, *realNode)
	case "status":
		err = s.status(stdout)
	case "real-node-check":
		if err = testcluster.RealNodeAvailable(""); err == nil {
			fmt.Fprintln(stdout, "This machine can run the real node.")
		}
	case "down":
		err = s.down(stdout)
	default:
		usage()
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "clusterctl:", err)
		return 1
	}
	return 0
}

// state names the files under .cluster/.
type state struct {
	root, dir, pidFile, readyFile, kubeconfig, logDir, supervisorLog string
}

func newState(root string) state {
	dir := filepath.Join(root, ".cluster")
	return state{
		root:          root,
		dir:           dir,
		pidFile:       filepath.Join(dir, "supervisor.pid"),
		readyFile:     filepath.Join(dir, "ready"),
		kubeconfig:    filepath.Join(dir, "kubeconfig"),
		logDir:        filepath.Join(dir, "logs"),
		supervisorLog: filepath.Join(dir, "supervisor.log"),
	}
}

// supervisor returns the pid of the running supervisor, or 0.
func (s state) supervisor() int {
	b, err := os.ReadFile(s.pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	// Guard against a reused pid: it must be this program's supervisor.
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || !strings.Contains(string(cmdline), "serve") || isZombie(pid) {
		return 0
	}
	return pid
}

func (s state) up(out io.Writer, nodes int, realNode bool) error {
	if pid := s.supervisor(); pid != 0 {
		if _, err := os.Stat(s.readyFile); err == nil {
			fmt.Fprintf(out, "The local control plane is already up (supervisor pid %d).\n", pid)
			s.printAccess(out)
			return nil
		}
		return fmt.Errorf("a supervisor (pid %d) is starting or stuck; run `make cluster-down` first", pid)
	}
	if _, err := testcluster.BinDir(); err != nil {
		return err
	}
	if realNode {
		if err := testcluster.RealNodeAvailable(""); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	for _, f := range []string{s.pidFile, s.readyFile, s.kubeconfig} {
		_ = os.Remove(f)
	}
	_ = os.RemoveAll(s.logDir)

	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.Create(s.supervisorLog)
	if err != nil {
		return err
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	attr := &os.ProcAttr{
		Dir:   s.root,
		Files: []*os.File{devnull, logf, logf},
		// Its own session: the supervisor outlives this command and the
		// terminal, and `down` finds every process it started by session.
		Sys: &syscall.SysProcAttr{Setsid: true},
	}
	start := time.Now()
	proc, err := os.StartProcess(self, []string{self, "serve", "-nodes", strconv.Itoa(nodes), "-real-node=" + strconv.FormatBool(realNode)}, attr)
	if err != nil {
		return fmt.Errorf("starting the supervisor: %w", err)
	}
	if err := os.WriteFile(s.pidFile, []byte(strconv.Itoa(proc.Pid)+"\n"), 0o644); err != nil {
		_ = proc.Kill()
		return err
	}
	exited := make(chan error, 1)
	go func() {
		st, err := proc.Wait()
		if err == nil {
			err = fmt.Errorf("supervisor exited: %s", st)
		}
		exited <- err
	}()

	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(upTimeout)
	for {
		select {
		case err := <-exited:
			_ = os.Remove(s.pidFile)
			return fmt.Errorf("%w; its log %s ends with:\n%s", err, s.supervisorLog, tail(s.supervisorLog, 20))
		case <-deadline:
			_ = s.down(io.Discard)
			return fmt.Errorf("not ready after %s; see %s and %s", upTimeout, s.supervisorLog, s.logDir)
		case <-tick.C:
		}
		if _, err := os.Stat(s.readyFile); err == nil {
			break
		}
	}
	withReal := ""
	if realNode {
		withReal = " and the real node " + testcluster.RealNodeName
	}
	fmt.Fprintf(out, "The local control plane is up in %.1f s (%d fake nodes%s, supervisor pid %d).\n",
		time.Since(start).Seconds(), nodes, withReal, proc.Pid)
	s.printAccess(out)
	return nil
}

func (s state) printAccess(out io.Writer) {
	kubectl := "kubectl"
	if dir, err := testcluster.BinDir(); err == nil {
		kubectl = filepath.Join(dir, "kubectl")
	}
	fmt.Fprintf(out, `Reach it with:
  export KUBECONFIG=%s
  %s get nodes
Component logs: %s
Stop it with: make cluster-down
`, s.kubeconfig, kubectl, s.logDir)
}

// serve runs in the detached supervisor: start the cluster, publish its
// kubeconfig, hold it until SIGTERM or SIGINT, then stop it.
func (s state) serve(nodes int, realNode bool) error {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	ctx, cancel := context.WithTimeout(context.Background(), upTimeout)
	defer cancel()
	fmt.Printf("%s starting the control plane (%d fake nodes)\n", time.Now().Format(time.RFC3339), nodes)
	opts := testcluster.Options{Workloads: true, Nodes: nodes, LogDir: s.logDir}
	if realNode {
		opts.RealNode = &testcluster.RealNodeOptions{Images: demoImages()}
	}
	c, err := testcluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	if realNode {
		fmt.Printf("%s the real node %s is Ready in %.1f s\n", time.Now().Format(time.RFC3339), testcluster.RealNodeName, c.RealNodeStartTime.Seconds())
	}
	defer func() {
		for _, f := range []string{s.readyFile, s.kubeconfig, s.pidFile} {
			_ = os.Remove(f)
		}
	}()
	kc, err := os.ReadFile(c.KubeconfigPath)
	if err == nil {
		err = os.WriteFile(s.kubeconfig, kc, 0o600)
	}
	if err == nil {
		err = os.WriteFile(s.readyFile, nil, 0o644)
	}
	if err != nil {
		return errors.Join(err, c.Stop())
	}
	fmt.Printf("%s ready: API server %s\n", time.Now().Format(time.RFC3339), c.RESTConfig.Host)

	sig := <-signals
	fmt.Printf("%s %s: stopping\n", time.Now().Format(time.RFC3339), sig)
	if err := c.Stop(); err != nil {
		return err
	}
	fmt.Printf("%s stopped\n", time.Now().Format(time.RFC3339))
	return nil
}

func (s state) status(out io.Writer) error {
	pid := s.supervisor()
	if pid == 0 {
		fmt.Fprintln(out, "The local control plane is down (start it with `make cluster-up`).")
		return nil
	}
	if _, err := os.Stat(s.readyFile); err != nil {
		fmt.Fprintf(out, "The local control plane is starting (supervisor pid %d).\n", pid)
		return nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("supervisor pid %d runs but the API server %s does not answer: %w", pid, cfg.Host, err)
	}
	ready := 0
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	fmt.Fprintf(out, "The local control plane is up: API server %s, %d of %d nodes Ready (supervisor pid %d).\n",
		cfg.Host, ready, len(nodes.Items), pid)
	s.printAccess(out)
	return nil
}

// down stops the supervisor (which stops the cluster), then kills whatever
// is left in its session, so that no process remains.
func (s state) down(out io.Writer) error {
	pid := s.supervisor()
	if pid == 0 {
		for _, f := range []string{s.pidFile, s.readyFile, s.kubeconfig} {
			_ = os.Remove(f)
		}
		fmt.Fprintln(out, "The local control plane is not running.")
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(downTimeout)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	if alive(pid) {
		errs = append(errs, fmt.Errorf("supervisor %d did not stop in %s; killed", pid, downTimeout))
	}
	// The supervisor is its session's leader: every process it started,
	// however deep, carries its pid as session id.
	if err := killSession(pid); err != nil {
		errs = append(errs, err)
	}
	for _, f := range []string{s.pidFile, s.readyFile, s.kubeconfig} {
		_ = os.Remove(f)
	}
	fmt.Fprintln(out, "The local control plane is stopped.")
	return errors.Join(errs...)
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
