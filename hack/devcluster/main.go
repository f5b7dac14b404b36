// Command devcluster starts and stops a persistent local control plane for development:
//
//	go run ./hack/devcluster up [--nodes 8]   # prints the kubeconfig path
//	go run ./hack/devcluster down
//
// The cluster's name is kept in _output/dev-cluster so that down finds it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/faultline-dev/faultline/test/cluster"
)

func main() {
	fs := flag.NewFlagSet("devcluster", flag.ExitOnError)
	nodes := fs.Int("nodes", 8, "fake GPU nodes to create")
	qps := fs.Int("controller-manager-qps", 0, "kube-controller-manager client QPS (0: upstream default)")
	audit := fs.String("audit-policy", "", "kube-apiserver audit policy file (the log is the cluster's logs/audit.log)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: devcluster up|down [flags]\n")
		fs.PrintDefaults()
	}
	if len(os.Args) < 2 {
		fs.Usage()
		os.Exit(2)
	}
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "up":
		err = up(*nodes, *qps, *audit)
	case "down":
		err = down()
	default:
		fs.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		os.Exit(1)
	}
}

func stateFile(t cluster.Tools) string { return filepath.Join(t.Root, "_output", "dev-cluster") }

func up(nodes, qps int, audit string) error {
	tools, err := cluster.FindTools()
	if err != nil {
		return err
	}
	if name, err := os.ReadFile(stateFile(tools)); err == nil {
		return fmt.Errorf("dev cluster %s is already up (make cluster-down first)", strings.TrimSpace(string(name)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{
		Name: "dev", Nodes: nodes, ControllerManagerQPS: qps, AuditPolicy: audit,
		Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(stateFile(tools), []byte(c.Name+"\n"), 0o644); err != nil {
		return errors.Join(err, c.Stop())
	}
	fmt.Fprintf(os.Stderr, "cluster %s is up with %d fake GPU nodes; try:\n  %s --kubeconfig %s get nodes\n",
		c.Name, nodes, tools.Kubectl(), c.Kubeconfig)
	fmt.Println(c.Kubeconfig)
	return nil
}

func down() error {
	tools, err := cluster.FindTools()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(stateFile(tools))
	if err != nil {
		return fmt.Errorf("no dev cluster is up (%s missing)", stateFile(tools))
	}
	name := strings.TrimSpace(string(b))
	if err := cluster.Delete(tools, name); err != nil {
		return err
	}
	return os.Remove(stateFile(tools))
}
