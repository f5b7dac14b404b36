package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/deploy"
	"github.com/faultline-dev/faultline/pkg/version"
)

// Components of an installation as `launcher install --components` names them, with the
// directory of deploy/ that holds each.
var installComponents = map[string]string{"crd": "crd", "admission": "admission", "controller": "controller", "agent": "daemonset", "kueue": "kueue"}

// InstallComponents lists the component names in the order they are applied.
// The admission policies come right after the CRD, so that neither the controller nor the
// agent ever runs unguarded.
var InstallComponents = []string{"crd", "admission", "controller", "agent"}

// OptionalComponents are installed only when named: kueue, the Kueue integration's RBAC (for a
// cluster that runs Kueue; docs/deploy.md, "Queueing with Kueue").
var OptionalComponents = []string{"kueue"}

// FieldManager is the launcher's name in managedFields.
const FieldManager = "faultline-launcher"

// InstallOptions choose what to install.
type InstallOptions struct {
	// Components, in any order; empty means all.
	Components []string
	// Version is the version whose images are installed (default: the launcher's own).
	Version string
	// Registry, when set, moves all three images there (<registry>/faultline:<version>, ...).
	Registry string
	// ControllerImage, AgentImage and BarrierImage, when set, replace one image each.
	ControllerImage, AgentImage, BarrierImage string
	// AgentDriverRoot and AgentCRIEndpoint are the node agent's --driver-root and
	// --cri-endpoint (default: found on each node; docs/platform-*.md).
	AgentDriverRoot, AgentCRIEndpoint string
	// WithoutRolesPolicy leaves out the MutatingAdmissionPolicy (deploy/admission/roles.yaml),
	// for clusters before Kubernetes 1.36 (RolesPolicyName).
	WithoutRolesPolicy bool
}

// RolesPolicyName is the MutatingAdmissionPolicy that labels the pods of an Index-scope run
// with roles (deploy/admission/roles.yaml), and its binding's.
const RolesPolicyName = "faultline-roles"

// Images are the images the options install: the launcher's version under the default
// registry, moved by Registry, each replaced by its own option.
func (o InstallOptions) Images() version.Images {
	im := version.ImagesOf(o.Registry, o.version())
	for _, r := range []struct {
		dst *string
		src string
	}{{&im.Controller, o.ControllerImage}, {&im.Agent, o.AgentImage}, {&im.Barrier, o.BarrierImage}} {
		if r.src != "" {
			*r.dst = r.src
		}
	}
	return im
}

// version is the version installed: the options', else the launcher's.
func (o InstallOptions) version() string {
	if o.Version != "" {
		return o.Version
	}
	return version.Version
}

// Manifests returns the objects of the chosen components, in the order they must be
// applied: the CRD, then Namespaces, then the rest in the manifests' order. A namespace
// that the chosen components use but do not create (the agent without the controller) is
// added.
func Manifests(o InstallOptions) ([]*unstructured.Unstructured, error) {
	want := o.Components
	if len(want) == 0 {
		want = InstallComponents
	}
	for _, c := range want {
		if _, ok := installComponents[c]; !ok {
			return nil, UsageError("unknown component %q: choose from %s", c, strings.Join(slices.Concat(InstallComponents, OptionalComponents), ", "))
		}
	}
	var objs []*unstructured.Unstructured
	for _, c := range slices.Concat(InstallComponents, OptionalComponents) {
		if !slices.Contains(want, c) {
			continue
		}
		docs, err := componentObjects(c)
		if err != nil {
			return nil, err
		}
		for _, u := range docs {
			labels := u.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			labels[ApplySetPartOfLabel] = ApplySetID(c)
			// The recommended labels: what an operator's tools group and filter by.
			labels[v1alpha1.LabelAppPartOf] = v1alpha1.PartOfFaultline
			labels[v1alpha1.LabelAppComponent] = c
			labels[v1alpha1.LabelAppVersion] = version.Tag(o.version())
			labels[v1alpha1.LabelAppManagedBy] = v1alpha1.ManagedByLauncher
			u.SetLabels(labels)
		}
		objs = append(objs, docs...)
	}
	namespaces := map[string]bool{}
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			namespaces[u.GetName()] = true
		}
	}
	if o.WithoutRolesPolicy {
		objs = slices.DeleteFunc(objs, func(u *unstructured.Unstructured) bool {
			return strings.HasPrefix(u.GetKind(), "MutatingAdmissionPolicy") && u.GetName() == RolesPolicyName
		})
	}
	images := o.Images()
	var added []*unstructured.Unstructured
	for _, u := range objs {
		if ns := u.GetNamespace(); ns != "" && !namespaces[ns] {
			namespaces[ns] = true
			n, err := namespaceOf(ns)
			if err != nil {
				return nil, err
			}
			added = append(added, n)
		}
		if err := setImages(u, images); err != nil {
			return nil, err
		}
		if err := setAgentArgs(u, o); err != nil {
			return nil, err
		}
	}
	rank := func(u *unstructured.Unstructured) int {
		switch u.GetKind() {
		case "CustomResourceDefinition":
			return 0
		case "Namespace":
			return 1
		}
		return 2
	}
	objs = append(added, objs...)
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return rank(a) - rank(b) })
	return objs, nil
}

// namespaceOf is the Namespace named name as the manifests define it (faultline's own, with
// its Pod Security labels: the agent alone needs it too), else a bare one.
func namespaceOf(name string) (*unstructured.Unstructured, error) {
	for _, c := range slices.Concat(InstallComponents, OptionalComponents) {
		docs, err := componentObjects(c)
		if err != nil {
			return nil, err
		}
		for _, u := range docs {
			if u.GetKind() == "Namespace" && u.GetName() == name {
				return u, nil
			}
		}
	}
	n := &unstructured.Unstructured{}
	n.SetAPIVersion("v1")
	n.SetKind("Namespace")
	n.SetName(name)
	return n, nil
}

// componentObjects are the objects of component c's manifests, in their order.
func componentObjects(c string) ([]*unstructured.Unstructured, error) {
	files, err := kustomizationFiles(installComponents[c])
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		docs, err := decodeManifest(f)
		if err != nil {
			return nil, err
		}
		objs = append(objs, docs...)
	}
	return objs, nil
}

// kustomizationFiles lists the manifest files of a kustomization directory of deploy/, in
// its resources' order (following nested directories).
func kustomizationFiles(dir string) ([]string, error) {
	raw, err := fs.ReadFile(deploy.FS, path.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, fmt.Errorf("embedded manifests: %w", err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := sigsyaml.Unmarshal(raw, &k); err != nil {
		return nil, fmt.Errorf("embedded %s/kustomization.yaml: %w", dir, err)
	}
	var files []string
	for _, r := range k.Resources {
		p := path.Join(dir, r)
		if st, err := fs.Stat(deploy.FS, p); err == nil && st.IsDir() {
			sub, err := kustomizationFiles(p)
			if err != nil {
				return nil, err
			}
			files = append(files, sub...)
			continue
		}
		files = append(files, p)
	}
	return files, nil
}

func decodeManifest(file string) ([]*unstructured.Unstructured, error) {
	f, err := deploy.FS.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out, err := DecodeObjects(f)
	if err != nil {
		return nil, fmt.Errorf("embedded %s: %w", file, err)
	}
	return out, nil
}

// DecodeObjects reads a stream of YAML (or JSON) documents as objects, skipping empty ones.
func DecodeObjects(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(r, 64<<10)
	var out []*unstructured.Unstructured
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(doc) > 0 {
			out = append(out, &unstructured.Unstructured{Object: doc})
		}
	}
}

// barrierImageFlag is the controller's flag that names the barrier's image.
const barrierImageFlag = "--barrier-image"

// setImages gives the controller's Deployment and the agent's DaemonSet their images, and the
// controller its --barrier-image argument: one version everywhere.
func setImages(u *unstructured.Unstructured, im version.Images) error {
	var image string
	switch u.GetKind() {
	case "Deployment":
		image = im.Controller
	case "DaemonSet":
		image = im.Agent
	default:
		return nil
	}
	containers, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	for i := range containers {
		c, ok := containers[i].(map[string]any)
		if !ok {
			continue
		}
		c["image"] = image
		if u.GetKind() != "Deployment" {
			continue
		}
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		args = slices.DeleteFunc(args, func(a string) bool { return a == barrierImageFlag || strings.HasPrefix(a, barrierImageFlag+"=") })
		c["args"] = toAny(append(args, barrierImageFlag+"="+im.Barrier))
	}
	return unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
}

// setAgentArgs gives the node agent's container the driver root and the runtime endpoint the
// options name (in the node's filesystem, which the agent sees under /host).
func setAgentArgs(u *unstructured.Unstructured, o InstallOptions) error {
	if u.GetKind() != "DaemonSet" || (o.AgentDriverRoot == "" && o.AgentCRIEndpoint == "") {
		return nil
	}
	containers, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) == 0 {
		return fmt.Errorf("%s %s: no containers: %v", u.GetKind(), u.GetName(), err)
	}
	c := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	for _, f := range []struct{ flag, v string }{{"--driver-root", o.AgentDriverRoot}, {"--cri-endpoint", o.AgentCRIEndpoint}} {
		flag, v := f.flag, f.v
		if v == "" {
			continue
		}
		args = slices.DeleteFunc(args, func(a string) bool { return strings.HasPrefix(a, flag+"=") })
		args = append(args, flag+"="+v)
	}
	c["args"] = toAny(args)
	return unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// PrintManifests writes the objects as one YAML stream.
func PrintManifests(w io.Writer, objs []*unstructured.Unstructured) error {
	for i, u := range objs {
		b, err := sigsyaml.Marshal(u.Object)
		if err != nil {
			return err
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// ApplyMode is how Apply applies: for real, or through the API server's dry run.
type ApplyMode int

const (
	// ApplyForReal applies, waits for each CRD, and prunes.
	ApplyForReal ApplyMode = iota
	// ApplyDryRun has the API server check every object (its schema, admission) and store
	// nothing; what would be pruned is named, not deleted (--dry-run=server).
	ApplyDryRun
	// ApplyDiff is the dry run, printing for each object what would change in it (--diff).
	ApplyDiff
)

// Apply applies the objects with server-side apply, as `kubectl apply --server-side
// --force-conflicts` would, and waits for each CRD to be Established before going on; then it
// prunes, from each component's ApplySet, what these objects no longer have. A dry run
// (mode) changes nothing; a diff that finds the install would change something ends with
// ExitDiffers (as kubectl diff exits 1), everything said.
func Apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, out io.Writer, mode ApplyMode) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dry := mode != ApplyForReal
	sets := applySetsOf(objs)
	before := map[string][]string{}
	for _, s := range sets {
		if before[s.component], err = s.writeParent(ctx, client, true, dry); err != nil {
			return err
		}
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	changes := 0                 // what a diff found the install would change
	creates := map[string]bool{} // the namespaces the objects create
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			creates[u.GetName()] = true
		}
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)}
	if dry {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			mapper.Reset()
			mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
		}
		var res dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			res = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
		}
		body, err := json.Marshal(u.Object)
		if err != nil {
			return err
		}
		var live *unstructured.Unstructured
		if mode == ApplyDiff {
			if live, err = res.Get(ctx, u.GetName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
				live = nil
			} else if err != nil {
				return fmt.Errorf("read %s %s: %w", strings.ToLower(gvk.Kind), u.GetName(), err)
			}
		}
		got, err := res.Patch(ctx, u.GetName(), types.ApplyPatchType, body, opts)
		if dry && apierrors.IsNotFound(err) && creates[u.GetNamespace()] {
			// A dry run creates no namespace: the server cannot check what goes in one.
			fmt.Fprintf(out, "%s/%s would be created in namespace %s, which this install creates (not checked by the server)\n", kindName(gvk), u.GetName(), u.GetNamespace())
			continue
		}
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", strings.ToLower(gvk.Kind), u.GetName(), err)
		}
		switch mode {
		case ApplyForReal:
			fmt.Fprintf(out, "%s/%s serverside-applied\n", kindName(gvk), u.GetName())
		case ApplyDryRun:
			fmt.Fprintf(out, "%s/%s serverside-applied (server dry run)\n", kindName(gvk), u.GetName())
		case ApplyDiff:
			changed, err := writeDiff(out, kindName(gvk)+"/"+u.GetName(), live, got)
			if err != nil {
				return err
			}
			if changed {
				changes++
			}
		}
		if gvk.Kind == "CustomResourceDefinition" && !dry {
			if err := waitEstablished(ctx, res, u.GetName()); err != nil {
				return err
			}
			mapper.Reset()
		}
	}
	mapper.Reset()
	for _, s := range sets {
		pruned, err := s.prune(ctx, mapper, dyn, union(before[s.component], s.kinds()), out, dry)
		if err != nil {
			return err
		}
		changes += pruned
		if _, err := s.writeParent(ctx, client, false, dry); err != nil {
			return err
		}
	}
	if mode == ApplyDiff && changes > 0 {
		fmt.Fprintf(out, "%d objects would change\n", changes)
		return &ExitError{Code: ExitDiffers}
	}
	return nil
}

// writeDiff prints what applying would change in one object, as a unified diff of its YAML
// (what the server would store against what it stores; nothing when they are the same), and
// says whether it would change.
func writeDiff(out io.Writer, name string, live, applied *unstructured.Unstructured) (bool, error) {
	text := func(u *unstructured.Unstructured) (string, error) {
		if u == nil {
			return "", nil
		}
		c := u.DeepCopy()
		for _, f := range [][]string{{"metadata", "managedFields"}, {"metadata", "resourceVersion"}, {"metadata", "generation"},
			{"metadata", "uid"}, {"metadata", "creationTimestamp"}, {"status"}} {
			unstructured.RemoveNestedField(c.Object, f...)
		}
		b, err := sigsyaml.Marshal(c.Object)
		return string(b), err
	}
	a, err := text(live)
	if err != nil {
		return false, err
	}
	b, err := text(applied)
	if err != nil {
		return false, err
	}
	if a == b {
		return false, nil
	}
	diff, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(a), B: difflib.SplitLines(b), FromFile: "live/" + name, ToFile: "installed/" + name, Context: 3,
	})
	if err != nil {
		return false, err
	}
	_, err = io.WriteString(out, diff)
	return true, err
}

// kindName is kubectl's name of an object's type: "deployment.apps", "namespace".
func kindName(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return strings.ToLower(gvk.Kind)
	}
	return strings.ToLower(gvk.Kind) + "." + gvk.Group
}

// waitEstablished waits until the API server serves the CRD's resources.
func waitEstablished(ctx context.Context, res dynamic.ResourceInterface, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not Established: %w", name, err)
	}
	return nil
}
