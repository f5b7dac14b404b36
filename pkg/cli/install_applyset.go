package cli

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/version"
)

// Each component of an installation is an ApplySet (KEP-3659, in kubectl's convention): its
// objects carry the set's id in a label, and a parent Secret in faultline's namespace names
// the kinds the set holds. An install applies a component's objects, then deletes the objects
// labelled as the set's that it no longer has: an upgrade prunes what the new version dropped,
// and an install of some components leaves the others' alone. kubectl sees the same sets
// (`kubectl apply --prune --applyset=secret/<parent> -n faultline-system`).
const (
	applySetIDLabel = "applyset.kubernetes.io/id"
	// ApplySetPartOfLabel carries the id of an object's set (ApplySetID).
	ApplySetPartOfLabel = "applyset.kubernetes.io/part-of"
	applySetTooling     = "applyset.kubernetes.io/tooling"
	applySetGroupKinds  = "applyset.kubernetes.io/contains-group-kinds"
)

// applySetParent is the name of component's ApplySet parent (a Secret in
// v1alpha1.NodeAgentNamespace).
func applySetParent(component string) string { return "faultline-applyset-" + component }

// ApplySetID is the id of component's ApplySet: kubectl's, from its parent's name,
// namespace, kind and group.
func ApplySetID(component string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s.%s.%s.%s", applySetParent(component), v1alpha1.NodeAgentNamespace, "Secret", "")))
	return "applyset-" + base64.RawURLEncoding.EncodeToString(sum[:]) + "-v1"
}

// groupKind is an ApplySet's name of a kind: Kind.group, or Kind for the core group.
func groupKind(gk schema.GroupKind) string {
	if gk.Group == "" {
		return gk.Kind
	}
	return gk.Kind + "." + gk.Group
}

func parseGroupKind(s string) schema.GroupKind {
	kind, group, _ := strings.Cut(s, ".")
	return schema.GroupKind{Group: group, Kind: kind}
}

// applySet is one component's set, as an install applies it.
type applySet struct {
	component string
	objs      []*unstructured.Unstructured
}

// applySetsOf groups objs by the ApplySet their label names (objects of none, a namespace
// added for a component that uses it, belong to no set).
func applySetsOf(objs []*unstructured.Unstructured) []*applySet {
	var sets []*applySet
	for _, c := range slices.Concat(InstallComponents, OptionalComponents) {
		s := &applySet{component: c}
		for _, u := range objs {
			if u.GetLabels()[ApplySetPartOfLabel] == ApplySetID(c) {
				s.objs = append(s.objs, u)
			}
		}
		if len(s.objs) > 0 {
			sets = append(sets, s)
		}
	}
	return sets
}

// kinds are the kinds of the set's objects, as the parent's annotation lists them.
func (s *applySet) kinds() []string {
	seen := map[string]bool{}
	for _, u := range s.objs {
		seen[groupKind(u.GroupVersionKind().GroupKind())] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// writeParent records on the set's parent Secret the kinds to look in at the next prune: those
// of before and now while the install runs (withBefore: a failed install leaves no kind
// unknown), only those of now once the prune is done. It returns the kinds the parent held
// before.
func (s *applySet) writeParent(ctx context.Context, client kubernetes.Interface, withBefore, dry bool) ([]string, error) {
	secrets := client.CoreV1().Secrets(v1alpha1.NodeAgentNamespace)
	name := applySetParent(s.component)
	parent, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if dry {
		// A dry run writes nothing: the kinds of before, if there is a parent yet.
		if apierrors.IsNotFound(err) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("ApplySet parent secret %s/%s: %w", v1alpha1.NodeAgentNamespace, name, err)
		}
		return strings.Split(parent.Annotations[applySetGroupKinds], ","), nil
	}
	if apierrors.IsNotFound(err) {
		parent = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1alpha1.NodeAgentNamespace}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.NodeAgentNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("namespace %s, for the ApplySet parent %s: %w", v1alpha1.NodeAgentNamespace, name, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("ApplySet parent secret %s/%s: %w", v1alpha1.NodeAgentNamespace, name, err)
	}
	var before []string
	if v := parent.Annotations[applySetGroupKinds]; v != "" {
		before = strings.Split(v, ",")
	}
	kinds := s.kinds()
	if withBefore {
		kinds = union(before, kinds)
	}
	metav1.SetMetaDataLabel(&parent.ObjectMeta, applySetIDLabel, ApplySetID(s.component))
	metav1.SetMetaDataAnnotation(&parent.ObjectMeta, applySetTooling, "launcher/"+version.Version)
	metav1.SetMetaDataAnnotation(&parent.ObjectMeta, applySetGroupKinds, strings.Join(kinds, ","))
	if parent.ResourceVersion == "" {
		_, err = secrets.Create(ctx, parent, metav1.CreateOptions{FieldManager: FieldManager})
	} else {
		_, err = secrets.Update(ctx, parent, metav1.UpdateOptions{FieldManager: FieldManager})
	}
	if err != nil {
		return nil, fmt.Errorf("ApplySet parent secret %s/%s: %w", v1alpha1.NodeAgentNamespace, name, err)
	}
	return before, nil
}

// prune deletes the objects labelled as the set's, of the kinds it held before or holds now,
// that it no longer has (a dry run names them only).
func (s *applySet) prune(ctx context.Context, mapper meta.RESTMapper, dyn dynamic.Interface, kinds []string, out io.Writer, dry bool) (pruned int, err error) {
	keep := map[string]bool{}
	for _, u := range s.objs {
		keep[groupKind(u.GroupVersionKind().GroupKind())+"/"+u.GetNamespace()+"/"+u.GetName()] = true
	}
	sel := ApplySetPartOfLabel + "=" + ApplySetID(s.component)
	for _, k := range kinds {
		mapping, err := mapper.RESTMapping(parseGroupKind(k))
		if meta.IsNoMatchError(err) {
			continue // a kind the cluster no longer serves holds nothing to prune
		}
		if err != nil {
			return pruned, err
		}
		list, err := dyn.Resource(mapping.Resource).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return pruned, fmt.Errorf("list the %s of ApplySet %s: %w", mapping.Resource.Resource, applySetParent(s.component), err)
		}
		for _, u := range list.Items {
			if keep[k+"/"+u.GetNamespace()+"/"+u.GetName()] {
				continue
			}
			pruned++
			if dry {
				fmt.Fprintf(out, "%s/%s pruned (server dry run: this version does not have it)\n", strings.ToLower(k), u.GetName())
				continue
			}
			var res dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
			if u.GetNamespace() != "" {
				res = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
			}
			if err := res.Delete(ctx, u.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(u.GetUID())}}); err != nil && !apierrors.IsNotFound(err) {
				return pruned, fmt.Errorf("prune %s %s: %w", strings.ToLower(k), u.GetName(), err)
			}
			fmt.Fprintf(out, "%s/%s pruned (this version does not have it)\n", strings.ToLower(k), u.GetName())
		}
	}
	return pruned, nil
}

// union is the sorted union of two lists of names.
func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
