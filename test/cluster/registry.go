package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/faultline-dev/faultline/pkg/image"
)

// Registry is an OCI registry (go-containerregistry's, in memory) served over plain HTTP on
// the loopback, for the real nodes' containerd to pull from (RealNodes.UseRegistry): the
// nodes share the host's network namespace. It records which manifests were pulled.
type Registry struct {
	// Host is its address, 127.0.0.1:PORT: the registry part of its images' names.
	Host string

	srv *http.Server
	ln  net.Listener

	mu    sync.Mutex
	pulls []string
}

// manifestGet is a pull of a manifest by tag or digest: GET /v2/<name>/manifests/<ref>, or
// HEAD, with which containerd resolves a tag before it pulls by the digest it got.
var manifestGet = regexp.MustCompile(`^/v2/(.+)/manifests/([^/]+)$`)

// StartRegistry serves an empty registry on 127.0.0.1. Close it when done.
func StartRegistry() (*Registry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Registry{Host: ln.Addr().String(), ln: ln}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if m := manifestGet.FindStringSubmatch(req.URL.Path); m != nil && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
			r.mu.Lock()
			r.pulls = append(r.pulls, m[1]+":"+m[2])
			r.mu.Unlock()
		}
		reg.ServeHTTP(w, req)
	})}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Push pushes idx as Host/name:tag and returns its digest.
func (r *Registry) Push(ctx context.Context, name, tag string, idx v1.ImageIndex) (string, error) {
	if err := image.Push(ctx, r.Host+"/"+name+":"+tag, idx, true); err != nil {
		return "", err
	}
	return image.Digest(idx)
}

// Pulled lists the manifests pulled so far, as "name:tag" or "name:sha256:…", in order.
func (r *Registry) Pulled() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.pulls)
}

// Close stops serving.
func (r *Registry) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.srv.Shutdown(ctx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("stop the registry on %s: %w", r.Host, err)
	}
	return nil
}
