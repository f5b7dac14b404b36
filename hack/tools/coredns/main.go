// Command coredns is CoreDNS with the plugins the real nodes of the test substrate use and no
// others: kubernetes (the per-index names <run>-<index>.<run>.<ns>.svc of a headless
// Service), bind (listen on the pod bridge's host address only), errors and log. CoreDNS's
// own main imports every plugin it has (cloud DNS providers, etcd, …), which triples the
// build for nothing the tests use.
package main

import (
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
