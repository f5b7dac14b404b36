// Package helmchart makes faultline's Helm chart (deploy/helm/faultline) from the manifests
// `launcher install` applies: one source, deploy/, for both. Each component of an install
// is a template that renders, for the chart's values, the objects pkg/cli.Manifests gives
// for the same options (Values maps one onto the other); what Helm renders differently is
// only who manages the objects (Helm's release, not an ApplySet of the launcher's).
//
// The templates are the install's objects rendered with sentinels where an option changes
// them (the images, the version, the agent's flags), each sentinel then replaced by the
// template expression that computes it; `make generate` writes them, a test renders them
// with Helm's engine against Manifests.
package helmchart

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/pkg/version"
)

// Dir is the chart's directory, relative to the repository's root.
const Dir = "deploy/helm/faultline"

// Name is the chart's name.
const Name = "faultline"

// ResourcePolicyAnnotation with "keep" tells Helm not to delete an object with its release.
const ResourcePolicyAnnotation = "helm.sh/resource-policy"

// DevVersion is the chart's version in a tree with no release: Helm wants SemVer.
const DevVersion = "0.0.0-dev"

// Values are the chart's values that give what `launcher install` applies with options o.
// An empty Version is the chart's appVersion, as it is the launcher's own for install.
func Values(o cli.InstallOptions) map[string]any {
	components := map[string]any{}
	want := o.Components
	if len(want) == 0 {
		want = cli.InstallComponents
	}
	for _, c := range slices.Concat(cli.InstallComponents, cli.OptionalComponents) {
		components[c] = slices.Contains(want, c)
	}
	registry := o.Registry
	if registry == "" {
		registry = version.DefaultRegistry
	}
	return map[string]any{
		"version":     o.Version,
		"registry":    registry,
		"images":      map[string]any{"controller": o.ControllerImage, "agent": o.AgentImage, "barrier": o.BarrierImage},
		"components":  components,
		"rolesPolicy": !o.WithoutRolesPolicy,
		"agent":       map[string]any{"driverRoot": o.AgentDriverRoot, "criEndpoint": o.AgentCRIEndpoint},
	}
}

// ChartVersion is the chart's version for faultline version v: v without its "v" (Helm
// wants SemVer), DevVersion for a tree with none.
func ChartVersion(v string) string {
	if v == "" || v == version.Dev {
		return DevVersion
	}
	return strings.TrimPrefix(v, "v")
}

// Sentinels: option values that Manifests copies into the objects unchanged, found there and
// replaced by the template expressions that compute them.
const (
	sentinelVersion     = "SENTINEL_VERSION"
	sentinelController  = "SENTINEL_CONTROLLER_IMAGE"
	sentinelAgent       = "SENTINEL_AGENT_IMAGE"
	sentinelBarrier     = "SENTINEL_BARRIER_IMAGE"
	sentinelDriverRoot  = "SENTINEL_DRIVER_ROOT"
	sentinelCRIEndpoint = "SENTINEL_CRI_ENDPOINT"
)

// sentinelOptions are the options whose objects hold every sentinel, for components.
func sentinelOptions(components ...string) cli.InstallOptions {
	return cli.InstallOptions{
		Components:      components,
		Version:         sentinelVersion,
		ControllerImage: sentinelController,
		AgentImage:      sentinelAgent,
		BarrierImage:    sentinelBarrier,
		AgentDriverRoot: sentinelDriverRoot, AgentCRIEndpoint: sentinelCRIEndpoint,
	}
}

// Files are the chart's files by their path in Dir, for faultline version v ("" or dev: a
// tree with no release) whose images are under registry ("": the default).
func Files(v, registry string) (map[string][]byte, error) {
	if v == "" {
		v = version.Dev
	}
	if registry == "" {
		registry = version.DefaultRegistry
	}
	files := map[string][]byte{
		"Chart.yaml":                []byte(fmt.Sprintf(chartYAML, Name, ChartVersion(v), v)),
		"values.yaml":               []byte(fmt.Sprintf(valuesYAML, registry)),
		"values.schema.json":        []byte(valuesSchema),
		"templates/_helpers.tpl":    []byte(fmt.Sprintf(helpersTPL, version.DefaultRegistry, version.ControllerImageName, version.AgentImageName, version.BarrierImageName)),
		"templates/NOTES.txt":       []byte(notesTXT),
		"templates/namespaces.yaml": nil,
	}
	// Where each component's objects live, to create a namespace whenever a component that
	// uses it is installed (as Manifests adds it).
	usedBy := map[string][]string{}
	var created []*unstructured.Unstructured
	for _, c := range slices.Concat(cli.InstallComponents, cli.OptionalComponents) {
		objs, err := cli.Manifests(sentinelOptions(c))
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "{{- /* %s */}}\n{{- if .Values.components.%s }}\n", generatedFrom(c), c)
		if c == "admission" {
			b.WriteString(rolesPolicyGuard)
		}
		for _, u := range objs {
			if ns := u.GetNamespace(); ns != "" && !slices.Contains(usedBy[ns], c) {
				usedBy[ns] = append(usedBy[ns], c)
			}
			if u.GetKind() == "Namespace" {
				// Its own component's (labelled), else one Manifests adds.
				if u.GetLabels()[v1alpha1.LabelAppComponent] == c {
					created = append(created, u)
				}
				continue
			}
			doc, err := template(u)
			if err != nil {
				return nil, err
			}
			if isRolesPolicy(u) {
				doc = "{{- if .Values.rolesPolicy }}\n" + doc + "{{- end }}\n"
			}
			b.WriteString(doc)
		}
		b.WriteString("{{- end }}\n")
		files["templates/"+c+".yaml"] = b.Bytes()
	}
	var ns bytes.Buffer
	for _, u := range created {
		owner := u.GetLabels()[v1alpha1.LabelAppComponent]
		var conds []string
		for _, c := range slices.Concat(cli.InstallComponents, cli.OptionalComponents) {
			if c == owner || slices.Contains(usedBy[u.GetName()], c) {
				conds = append(conds, ".Values.components."+c)
			}
		}
		cond := conds[0]
		if len(conds) > 1 {
			cond = "or " + strings.Join(conds, " ")
		}
		doc, err := template(u)
		if err != nil {
			return nil, err
		}
		// The recommended labels (sorted together) are its component's: a namespace made for
		// another is bare.
		var b strings.Builder
		recommended := false
		for _, l := range strings.SplitAfter(doc, "\n") {
			is := strings.HasPrefix(strings.TrimSpace(l), "app.kubernetes.io/")
			if is && !recommended {
				fmt.Fprintf(&b, "{{- if .Values.components.%s }}\n", owner)
			} else if !is && recommended {
				b.WriteString("{{- end }}\n")
			}
			recommended = is
			b.WriteString(l)
		}
		fmt.Fprintf(&ns, "{{- if %s }}\n%s%s{{- end }}\n", cond, fmt.Sprintf(releaseNamespaceGuard, u.GetName()), b.String())
	}
	files["templates/namespaces.yaml"] = ns.Bytes()
	return files, nil
}

// generatedFrom says where component c's template comes from.
func generatedFrom(c string) string {
	return fmt.Sprintf("The component %s of `launcher install`. %s", c, generated)
}

// isRolesPolicy is whether u is the MutatingAdmissionPolicy, or its binding, that
// `launcher install --without-roles-policy` leaves out.
func isRolesPolicy(u *unstructured.Unstructured) bool {
	return strings.HasPrefix(u.GetKind(), "MutatingAdmissionPolicy") && u.GetName() == cli.RolesPolicyName
}

// template is u as a template: a YAML document whose sentinels are template expressions, its
// ApplySet label gone and the tool that manages it Helm's release service.
func template(u *unstructured.Unstructured) (string, error) {
	u = u.DeepCopy()
	labels := u.GetLabels()
	delete(labels, cli.ApplySetPartOfLabel)
	u.SetLabels(labels)
	if u.GetKind() == "CustomResourceDefinition" {
		// helm uninstall keeps the CRDs, and with them every run: removing faultline is
		// launcher uninstall's (it ends the runs first), or a deliberate kubectl delete.
		annotations := u.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[ResourcePolicyAnnotation] = "keep"
		u.SetAnnotations(annotations)
	}
	raw, err := sigsyaml.Marshal(u.Object)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	// Text of the manifests that looks like an action stays text.
	text := strings.ReplaceAll(string(raw), "{{", `{{ "{{" }}`)
	var b strings.Builder
	b.WriteString("---\n")
	for _, l := range strings.SplitAfter(text, "\n") {
		if l == "" {
			continue
		}
		indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
		switch strings.TrimSpace(l) {
		case v1alpha1.LabelAppVersion + ": " + sentinelVersion:
			l = indent + v1alpha1.LabelAppVersion + `: {{ include "faultline.tag" . | quote }}` + "\n"
		case v1alpha1.LabelAppManagedBy + ": " + v1alpha1.ManagedByLauncher:
			l = indent + v1alpha1.LabelAppManagedBy + ": {{ .Release.Service | quote }}\n"
		case "image: " + sentinelController:
			l = indent + `image: {{ include "faultline.image" (list . "controller") | quote }}` + "\n"
		case "image: " + sentinelAgent:
			l = indent + `image: {{ include "faultline.image" (list . "agent") | quote }}` + "\n"
		case "- --barrier-image=" + sentinelBarrier:
			l = indent + `- {{ printf "--barrier-image=%s" (include "faultline.image" (list . "barrier")) | quote }}` + "\n"
		case "- --driver-root=" + sentinelDriverRoot:
			l = optionalArg(indent, "--driver-root", ".Values.agent.driverRoot")
		case "- --cri-endpoint=" + sentinelCRIEndpoint:
			l = optionalArg(indent, "--cri-endpoint", ".Values.agent.criEndpoint")
		}
		if strings.Contains(l, "SENTINEL_") {
			return "", fmt.Errorf("%s %s: an option's value where the chart cannot template it: %q", u.GetKind(), u.GetName(), strings.TrimSpace(l))
		}
		b.WriteString(l)
	}
	return b.String(), nil
}

// optionalArg is a list item, flag=value, that only a value that is set renders.
func optionalArg(indent, flag, value string) string {
	return fmt.Sprintf("%[1]s{{- with %[3]s }}\n%[1]s- {{ printf \"%[2]s=%%s\" . | quote }}\n%[1]s{{- end }}\n", indent, flag, value)
}
