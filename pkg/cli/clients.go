package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// IOStreams are where a command reads and writes.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// Env is what every command starts from: the kubeconfig flags (kubectl's own, from
// cli-runtime), the streams and the clock.
type Env struct {
	Flags *genericclioptions.ConfigFlags
	IO    IOStreams
	Now   func() time.Time
}

// Server is the API server's address as configured, "" if there is no configuration.
func (e *Env) Server() string {
	if e.Flags == nil {
		return ""
	}
	cfg, err := e.Flags.ToRESTConfig()
	if err != nil {
		return ""
	}
	return cfg.Host
}

// Clients talk to one cluster, in one namespace.
type Clients struct {
	Config *rest.Config
	Kube   kubernetes.Interface
	Runs   *Runs
	// Namespace is the namespace of the command: --namespace, else the kubeconfig
	// context's, else "default". NamespaceExplicit says whether --namespace was given.
	Namespace         string
	NamespaceExplicit bool
}

// Clients builds the clients from the flags. It does not contact the server.
func (e *Env) Clients() (*Clients, error) {
	if err := e.checkConfig(); err != nil {
		return nil, err
	}
	cfg, err := e.Flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	ns, explicit, err := e.Flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "faultline-launcher"
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	rc, err := runsREST(cfg)
	if err != nil {
		return nil, err
	}
	return &Clients{Config: cfg, Kube: kube, Runs: &Runs{REST: rc, Namespace: ns}, Namespace: ns, NamespaceExplicit: explicit}, nil
}

// ErrNoConfig: there is no kubeconfig, no --server, and this is not a pod.
var ErrNoConfig = errors.New("no cluster configured: pass --kubeconfig, set KUBECONFIG, or put your cluster's kubeconfig in ~/.kube/config " +
	"(`kubectl config view` shows what kubectl would use); " +
	"for a local cluster with fake GPU nodes, `make cluster-up` in a faultline checkout starts one and prints its kubeconfig path")

// checkConfig refuses to go on without any configuration, where client-go would fall back
// to http://localhost:8080 and report a confusing connection error.
func (e *Env) checkConfig() error {
	if p := e.Flags.KubeConfig; p != nil && *p != "" {
		if _, err := os.Stat(*p); err != nil {
			return UsageError("kubeconfig %s: %v: pass the path of an existing kubeconfig (the local dev cluster's is the path `make cluster-up` prints)", *p, errors.Unwrap(err))
		}
	}
	if s := e.Flags.APIServer; s != nil && *s != "" {
		return nil
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return nil // in a pod: the in-cluster configuration applies
	}
	raw, err := e.Flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return err
	}
	if len(raw.Clusters) == 0 {
		return ErrNoConfig
	}
	return nil
}

// NewRuns is a client of the TrainingRuns of namespace (for programs that have a
// rest.Config rather than kubeconfig flags, e.g. the demo).
func NewRuns(cfg *rest.Config, namespace string) (*Runs, error) {
	rc, err := runsREST(cfg)
	if err != nil {
		return nil, err
	}
	return &Runs{REST: rc, Namespace: namespace}, nil
}

// clientScheme knows the built-in types and faultline's.
var clientScheme = scheme.New()

func runsREST(cfg *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &v1alpha1.GroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(clientScheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// Runs reads and writes the TrainingRuns of one namespace. Its errors name the run and
// the namespace, and tell a missing run from a missing API.
type Runs struct {
	REST      rest.Interface
	Namespace string
}

func (r *Runs) req(verb string) *rest.Request {
	var q *rest.Request
	switch verb {
	case "get":
		q = r.REST.Get()
	case "post":
		q = r.REST.Post()
	case "patch":
		q = r.REST.Patch(types.MergePatchType)
	case "delete":
		q = r.REST.Delete()
	}
	return q.Namespace(r.Namespace).Resource(v1alpha1.ResourceTrainingRun)
}

// Get reads one run.
func (r *Runs) Get(ctx context.Context, name string) (*v1alpha1.TrainingRun, error) {
	run := &v1alpha1.TrainingRun{}
	err := r.req("get").Name(name).Do(ctx).Into(run)
	if err != nil {
		return nil, r.wrap(err, name)
	}
	return run, nil
}

// List reads every run of the namespace, sorted by name.
func (r *Runs) List(ctx context.Context) ([]v1alpha1.TrainingRun, error) {
	list, err := r.ListWith(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// ListWith reads the runs that opts select (a label selector, a field selector); the list's
// resourceVersion is where a watch of the same runs starts.
func (r *Runs) ListWith(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.TrainingRunList, error) {
	list := &v1alpha1.TrainingRunList{}
	if err := r.req("get").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(list); err != nil {
		return nil, r.wrap(err, "")
	}
	return list, nil
}

// Watch calls fn with each run that opts select as it changes after resourceVersion, until
// ctx ends (then it returns nil) or fn fails. It rides out the API server's closing a
// watch, as kubectl get -w does.
func (r *Runs) Watch(ctx context.Context, resourceVersion string, opts metav1.ListOptions, fn func(watch.EventType, *v1alpha1.TrainingRun) error) error {
	lw := cache.NewFilteredListWatchFromClient(r.REST, v1alpha1.ResourceTrainingRun, r.Namespace, func(o *metav1.ListOptions) {
		o.LabelSelector, o.FieldSelector = opts.LabelSelector, opts.FieldSelector
	})
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, resourceVersion, lw)
	if err != nil {
		return r.wrap(err, "")
	}
	defer rw.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-rw.ResultChan():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("the watch of trainingruns ended")
			}
			switch e.Type {
			case watch.Error:
				return r.wrap(apierrors.FromObject(e.Object), "")
			case watch.Bookmark:
				continue
			}
			run, ok := e.Object.(*v1alpha1.TrainingRun)
			if !ok {
				continue
			}
			if err := fn(e.Type, run); err != nil {
				return err
			}
		}
	}
}

// Create creates a run from its JSON as given, asking the server to refuse unknown or
// duplicate fields rather than drop them: a typo in a spec must not pass silently.
func (r *Runs) Create(ctx context.Context, body []byte) (*v1alpha1.TrainingRun, error) {
	return r.create(ctx, body, false)
}

// CreateDryRun asks the API server to check a run as Create would, through its whole
// validation and admission, and to store nothing; it returns what would have been stored.
func (r *Runs) CreateDryRun(ctx context.Context, body []byte) (*v1alpha1.TrainingRun, error) {
	return r.create(ctx, body, true)
}

func (r *Runs) create(ctx context.Context, body []byte, dryRun bool) (*v1alpha1.TrainingRun, error) {
	out := &v1alpha1.TrainingRun{}
	q := r.req("post").Param("fieldValidation", metav1.FieldValidationStrict)
	if dryRun {
		q = q.Param("dryRun", metav1.DryRunAll)
	}
	err := q.SetHeader("Content-Type", runtime.ContentTypeJSON).Body(body).Do(ctx).Into(out)
	if err != nil {
		return nil, r.wrap(err, "")
	}
	return out, nil
}

// Patch merge-patches one run.
func (r *Runs) Patch(ctx context.Context, name string, patch []byte) (*v1alpha1.TrainingRun, error) {
	out := &v1alpha1.TrainingRun{}
	if err := r.req("patch").Name(name).Body(patch).Do(ctx).Into(out); err != nil {
		return nil, r.wrap(err, name)
	}
	return out, nil
}

// Delete deletes one run; its Jobs, pods and Service follow through owner references.
func (r *Runs) Delete(ctx context.Context, name string) error {
	policy := metav1.DeletePropagationBackground
	err := r.req("delete").Name(name).Body(&metav1.DeleteOptions{PropagationPolicy: &policy}).Do(ctx).Error()
	return r.wrap(err, name)
}

// ListWatch lists and watches one run by name.
func (r *Runs) ListWatch(name string) *cache.ListWatch {
	return cache.NewListWatchFromClient(r.REST, v1alpha1.ResourceTrainingRun, r.Namespace, fields.OneTermEqualSelector("metadata.name", name))
}

// wrap turns a 404 into RunNotFoundError or ErrAPINotInstalled and adds context to others.
func (r *Runs) wrap(err error, name string) error {
	if err == nil {
		return nil
	}
	if apierrors.IsNotFound(err) {
		st := err.(apierrors.APIStatus).Status()
		// A missing object names itself in the details; a missing API route does not.
		if name == "" || st.Details == nil || st.Details.Name == "" || strings.Contains(st.Message, "could not find the requested resource") {
			return ErrAPINotInstalled
		}
		return &RunNotFoundError{Name: name, Namespace: r.Namespace}
	}
	if name != "" {
		return fmt.Errorf("trainingrun %s in namespace %s: %w", name, r.Namespace, err)
	}
	return err
}
