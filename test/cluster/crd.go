package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
)

// InstallCRDs applies every CRD in the *.yaml files of dir (e.g. deploy/crd) with server-side
// apply (the TrainingRun CRD is too big for client-side apply's last-applied annotation) and
// waits until each one is Established and served by discovery, so that its resources can be
// used at once.
func (c *Cluster) InstallCRDs(ctx context.Context, dir string) error {
	docs, client, err := c.crdsIn(dir)
	if err != nil {
		return err
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	var names []string
	for _, doc := range docs {
		body, err := json.Marshal(doc.body)
		if err != nil {
			return err
		}
		_, err = crds.Patch(ctx, doc.name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: "faultline-test", Force: ptr.To(true)})
		if err != nil {
			return fmt.Errorf("apply CRD %s from %s: %w", doc.name, doc.file, err)
		}
		names = append(names, doc.name)
	}
	for _, name := range names {
		var crd *apiextensionsv1.CustomResourceDefinition
		_, err := watchtools.UntilWithSync(ctx, crdListWatch(client, name), &apiextensionsv1.CustomResourceDefinition{}, nil, func(e watch.Event) (bool, error) {
			obj, ok := e.Object.(*apiextensionsv1.CustomResourceDefinition)
			if !ok || e.Type == watch.Deleted {
				return false, nil
			}
			crd = obj
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("wait for CRD %s to be Established: %w", name, err)
		}
		if err := c.waitDiscovery(ctx, crd); err != nil {
			return err
		}
		c.logf("CRD %s established", name)
	}
	return nil
}

// DeleteCRDs deletes every CRD in the *.yaml files of dir that the cluster has, with its
// custom resources, and waits until each is gone: for a test that must meet a cluster without
// them, run again in the same package (go test -count).
func (c *Cluster) DeleteCRDs(ctx context.Context, dir string) error {
	docs, client, err := c.crdsIn(dir)
	if err != nil {
		return err
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, doc := range docs {
		err := crds.Delete(ctx, doc.name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("delete CRD %s: %w", doc.name, err)
		}
		if _, err := watchtools.UntilWithSync(ctx, crdListWatch(client, doc.name), &apiextensionsv1.CustomResourceDefinition{}, func(store cache.Store) (bool, error) {
			return len(store.List()) == 0, nil
		}, func(e watch.Event) (bool, error) { return e.Type == watch.Deleted, nil }); err != nil {
			return fmt.Errorf("wait for CRD %s to be gone: %w", doc.name, err)
		}
		c.logf("CRD %s deleted", doc.name)
	}
	return nil
}

// crdsIn reads the CRDs of dir's *.yaml files, and a client of the cluster's CRDs.
func (c *Cluster) crdsIn(dir string) ([]crdDoc, *apiextensions.Clientset, error) {
	docs, err := readCRDs(dir)
	if err != nil {
		return nil, nil, err
	}
	client, err := apiextensions.NewForConfig(c.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("apiextensions clientset: %w", err)
	}
	return docs, client, nil
}

// crdListWatch lists and watches the CRD named name.
func crdListWatch(client *apiextensions.Clientset, name string) *cache.ListWatch {
	return cache.NewListWatchFromClient(client.ApiextensionsV1().RESTClient(), "customresourcedefinitions", "",
		fields.OneTermEqualSelector("metadata.name", name))
}

// waitDiscovery waits until the API server's discovery serves the CRD's resource: clients
// map kinds to resources through discovery, and it follows Established by a moment, with
// nothing to watch for it.
func (c *Cluster) waitDiscovery(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			list, err := c.Client.Discovery().ServerResourcesForGroupVersion(crd.Spec.Group + "/" + v.Name)
			if err != nil {
				return false, nil
			}
			if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == crd.Spec.Names.Plural }) {
				return false, nil
			}
		}
		return true, nil
	})
}

// crdDoc is one CRD of a manifest file.
type crdDoc struct {
	file, name string
	body       map[string]any
}

// readCRDs reads the CRDs in the *.yaml files of dir.
func readCRDs(dir string) ([]crdDoc, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRD manifests (*.yaml) in %s", dir)
	}
	var docs []crdDoc
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 64<<10)
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("decode %s: %w", file, err)
			}
			if doc["kind"] != "CustomResourceDefinition" {
				continue // e.g. the kustomization next to the CRDs
			}
			meta, _ := doc["metadata"].(map[string]any)
			name, _ := meta["name"].(string)
			docs = append(docs, crdDoc{file: file, name: name, body: doc})
		}
	}
	return docs, nil
}
