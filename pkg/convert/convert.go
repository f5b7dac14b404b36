// Package convert turns the manifests of other training operators (a JobSet, a Kubeflow
// PyTorchJob, a Kubeflow Trainer TrainJob) into the TrainingRun that does the same job, and
// says what it could not carry over and why. It is pure: it takes the decoded object and
// returns the run and its issues; reading files and printing are the launcher's
// (`launcher convert`). docs/migration.md maps every field.
//
// The other projects' Go modules are not imported: their types pull in large dependency
// trees for the few fields read here. The object is decoded into small local structs with
// the projects' JSON names, strictly, so that a field this package does not know is
// reported rather than dropped in silence.
package convert

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// The sources convert reads, by group and kind.
const (
	JobSetGroup  = "jobset.x-k8s.io"
	JobSetKind   = "JobSet"
	KubeflowV1   = "kubeflow.org/v1"
	PyTorchJob   = "PyTorchJob"
	TrainerGroup = "trainer.kubeflow.org"
	TrainJobKind = "TrainJob"
)

// The frameworks of faultline's shipped plugins (pkg/framework.Shipped), and the options of
// theirs that a conversion sets (each plugin's package documentation).
const (
	frameworkJAX        = "jax"
	frameworkPyTorch    = "pytorch"
	frameworkTensorFlow = "tensorflow"

	torchOptionRendezvous   = "rendezvous"
	torchOptionPort         = "port"
	torchOptionNprocPerNode = "nprocPerNode"
	torchRendezvousC10d     = "c10d"
)

// The rules a conversion adds to keep what the source did where faultline's defaults would not.
const (
	// RuleRestartApplication restarts on an application error, where the source restarts on
	// any failure up to a limit: faultline's default fails a run on an application error at
	// once.
	RuleRestartApplication = "restart-application-failures"
	// RuleRestartEveryFailure restarts on every failure without spending budget, where the
	// source restarts on any failure without limit.
	RuleRestartEveryFailure = "restart-every-failure"
	// RuleIgnoreDisruptions restarts on a disruption (what Kubernetes marks DisruptionTarget:
	// a preemption, an eviction, a node shutdown, a lost or tainted node) without spending
	// budget, where the source's pod failure policy ignored disrupted pods.
	RuleIgnoreDisruptions = "ignore-disruptions"
)

// disruptionCauses are the causes faultline gives a pod that Kubernetes marked
// DisruptionTarget (pkg/exitclass, disruptionCause), a planned maintenance aside: that one
// spends no budget by default.
var disruptionCauses = []v1alpha1.Cause{
	v1alpha1.CauseNodeShutdown, v1alpha1.CauseNodeMaintenance, v1alpha1.CausePreemption, v1alpha1.CauseEviction, v1alpha1.CauseNodeLost,
}

// Issue is one thing of the source that the TrainingRun does not carry as it was.
type Issue struct {
	// Field is the path of the source's field, e.g. spec.replicatedJobs[1].
	Field string
	// Message says what the TrainingRun does instead, and why.
	Message string
	// Differs says that the run would behave differently from the source there: it would
	// restart, fail, succeed, stop or wait where the source would not, or the other way round.
	// Otherwise the issue is a note: the same behaviour in faultline's form (another DNS name,
	// a policy written another way).
	Differs bool
}

func (i Issue) String() string {
	kind := "note"
	if i.Differs {
		kind = "differs"
	}
	return kind + ": " + i.Field + ": " + i.Message
}

// Result is a conversion's outcome.
type Result struct {
	// Source names what was read: "JobSet default/pytorch".
	Source string
	Run    *v1alpha1.TrainingRun
	Issues []Issue
}

// Differs reports whether any issue makes the run behave differently from the source.
func (r *Result) Differs() bool {
	for _, i := range r.Issues {
		if i.Differs {
			return true
		}
	}
	return false
}

// Options change a conversion.
type Options struct {
	// Framework names the run's framework plugin. Empty: the source's (a PyTorchJob is
	// pytorch, a TrainJob its runtime's), else guessed from the template (torchrun → pytorch,
	// a jax or tensorflow image → jax or tensorflow), else "none".
	Framework string
}

// Convert reads one decoded object and returns the TrainingRun that does its job. An
// object of another kind, or one that cannot be read at all, is an error.
func Convert(obj *unstructured.Unstructured, o Options) (*Result, error) {
	gvk := obj.GroupVersionKind()
	switch {
	case gvk.Group == JobSetGroup && gvk.Kind == JobSetKind:
		if gvk.Version != "v1alpha2" {
			return nil, fmt.Errorf("JobSet %s: apiVersion %s; convert reads %s/v1alpha2", obj.GetName(), obj.GetAPIVersion(), JobSetGroup)
		}
		return fromJobSet(obj, o)
	case gvk.GroupVersion().String() == KubeflowV1 && gvk.Kind == PyTorchJob:
		return fromPyTorchJob(obj, o)
	case gvk.Group == TrainerGroup && gvk.Kind == TrainJobKind:
		if gvk.Version != "v1alpha1" {
			return nil, fmt.Errorf("TrainJob %s: apiVersion %s; convert reads %s/v1alpha1", obj.GetName(), obj.GetAPIVersion(), TrainerGroup)
		}
		return fromTrainJob(obj, o)
	}
	return nil, fmt.Errorf("a %s of %s: convert reads a JobSet (%s/v1alpha2), a PyTorchJob (%s) or a TrainJob (%s/v1alpha1)",
		gvk.Kind, obj.GetAPIVersion(), JobSetGroup, KubeflowV1, TrainerGroup)
}

// conversion collects a run and its issues.
type conversion struct {
	run    *v1alpha1.TrainingRun
	issues []Issue
}

func (c *conversion) note(field, format string, args ...any) {
	c.issues = append(c.issues, Issue{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (c *conversion) differs(field, format string, args ...any) {
	c.issues = append(c.issues, Issue{Field: field, Message: fmt.Sprintf(format, args...), Differs: true})
}

func (c *conversion) result(kind string, meta *metav1.ObjectMeta) *Result {
	src := kind + " " + meta.Name
	if meta.Namespace != "" {
		src = kind + " " + meta.Namespace + "/" + meta.Name
	}
	return &Result{Source: src, Run: c.run, Issues: c.issues}
}

// decode reads obj into out strictly: every field out does not have is an issue (Differs),
// since nothing here knows what it did.
func (c *conversion) decode(obj *unstructured.Unstructured, out any) error {
	err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, out, true)
	if err == nil {
		return nil
	}
	strict, ok := runtime.AsStrictDecodingError(err)
	if !ok {
		return fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	var fields []string
	for _, e := range strict.Errors() {
		fields = append(fields, e.Error())
	}
	sort.Strings(fields)
	for _, f := range fields {
		name := strings.TrimSuffix(strings.TrimPrefix(f, `unknown field "`), `"`)
		c.differs(name, "not a field this converter knows: not carried over (is the manifest for another version of its API?)")
	}
	return nil
}

// newRun starts the run from the source's metadata: its name, namespace, labels (a Kueue
// queue among them) and annotations, without what the API server wrote.
func (c *conversion) newRun(meta *metav1.ObjectMeta) {
	c.run = &v1alpha1.TrainingRun{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.KindTrainingRun},
		ObjectMeta: metav1.ObjectMeta{
			Name:         meta.Name,
			GenerateName: meta.GenerateName,
			Namespace:    meta.Namespace,
			Labels:       meta.Labels,
		},
	}
	for k, v := range meta.Annotations {
		if k == corev1.LastAppliedConfigAnnotation {
			continue
		}
		if c.run.Annotations == nil {
			c.run.Annotations = map[string]string{}
		}
		c.run.Annotations[k] = v
	}
	if q := meta.Labels[v1alpha1.LabelQueueName]; q != "" {
		c.note("metadata.labels."+v1alpha1.LabelQueueName, "the run queues in Kueue's LocalQueue %s as one Workload of faultline's own "+
			"(Kueue's configuration must name TrainingRun.v1alpha1.faultline.dev in integrations.externalFrameworks: docs/deploy.md, \"Queueing with Kueue\")", q)
	}
}

// template sets the run's pod template from the source's, with what faultline owns taken
// out: the restart policy (faultline restarts workers itself; the CRD allows only Never), the
// hostname and subdomain (faultline names every pod <run>-<index> under the Service <run>),
// and keys under faultline.dev/.
func (c *conversion) template(field string, tmpl corev1.PodTemplateSpec) {
	tmpl = *tmpl.DeepCopy()
	if p := tmpl.Spec.RestartPolicy; p != "" && p != corev1.RestartPolicyNever {
		c.note(field+".spec.restartPolicy", "%s becomes Never: a worker restarted in its pod would join its gang twice; faultline restarts the gang as spec.failurePolicy says", p)
	}
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	if tmpl.Spec.Hostname != "" || tmpl.Spec.Subdomain != "" {
		c.note(field+".spec", "hostname and subdomain are left out: faultline names pod i <run>-i in the headless Service <run>")
		tmpl.Spec.Hostname, tmpl.Spec.Subdomain = "", ""
	}
	for _, m := range []struct {
		what string
		keys map[string]string
	}{{"labels", tmpl.Labels}, {"annotations", tmpl.Annotations}} {
		for k := range m.keys {
			if strings.HasPrefix(k, v1alpha1.GroupName+"/") {
				c.differs(field+".metadata."+m.what+"."+k, "left out: keys under %s/ are faultline's own", v1alpha1.GroupName)
				delete(m.keys, k)
			}
		}
	}
	c.run.Spec.Template = tmpl
}

// anyFailure is a source's limit on restarts after a failure, whatever its cause.
type anyFailure struct {
	// field is the source's field that sets the limit, what the source's policy in words.
	field, what string
	// n is how many times the source restarts; unlimited, as often as it fails.
	n         int32
	unlimited bool
	// alone is what the source restarted short of the whole job ("the failed pod"), or ""
	// where every restart restarted everything.
	alone string
}

// restartOnAnyFailure writes a source's restart limit as faultline's policy. faultline
// judges each failure and counts restarts per class, so the limit is kept as closely as the
// run can say it:
//   - no restart: a budget of 0 for every class, so that the run fails at the first failure
//     as the source did (faultline's defaults would restart on infrastructure faults);
//   - n restarts: n for every class, with a rule that restarts application errors too (which
//     faultline's defaults fail at once); the classes' budgets add up to 3n, which differs;
//   - no limit: a rule that restarts on every failure without spending budget.
//
// A restart of the run restarts the whole gang: where the source restarted a pod alone
// (alone), the run differs.
func (c *conversion) restartOnAnyFailure(a anyFailure) {
	fp := &c.run.Spec.FailurePolicy
	var says, hint string
	switch {
	case a.unlimited:
		fp.Rules = append(fp.Rules, v1alpha1.FailurePolicyRule{Name: RuleRestartEveryFailure, Action: v1alpha1.ActionRestartRunIgnoreBudget})
		says = fmt.Sprintf("%s restarts after any failure, without limit; so does the run, through rule %s (which spends no budget)", a.what, RuleRestartEveryFailure)
		hint = "Delete the rule for faultline's point: restart on infrastructure faults, fail fast on a bug"
	case a.n <= 0:
		fp.MaxRestarts = v1alpha1.RestartBudgets{Infrastructure: ptr.To[int32](0), Application: ptr.To[int32](0), Unknown: ptr.To[int32](0)}
		c.note(a.field, "%s fails the job at its first failure; so does the run: spec.failurePolicy.maxRestarts is 0 for each class. "+
			"Delete maxRestarts for faultline's point: restart on an infrastructure fault (up to 10: a node shutdown, a GPU fault, a preemption) "+
			"or a failure without evidence (1), fail at once on an application error", a.what)
		return
	default:
		fp.MaxRestarts = v1alpha1.RestartBudgets{Infrastructure: ptr.To(a.n), Application: ptr.To(a.n), Unknown: ptr.To(a.n)}
		fp.Rules = append(fp.Rules, v1alpha1.FailurePolicyRule{
			Name:      RuleRestartApplication,
			OnClasses: []v1alpha1.Class{v1alpha1.ClassApplication},
			Action:    v1alpha1.ActionRestartRun,
		})
		says = fmt.Sprintf("%s restarts after any failure, up to %d times in all; the run counts each class apart, up to %d times each "+
			"(infrastructure, application, unknown; the application errors through rule %s), so it may restart up to %d times where the source stopped at %d",
			a.what, a.n, a.n, RuleRestartApplication, 3*int64(a.n), a.n)
		hint = "Delete the rule to fail fast on a bug, faultline's default"
	}
	switch {
	case a.alone != "":
		c.differs(a.field, "%s; and each restart restarts the whole gang, where the source restarted %s. %s", says, a.alone, hint)
	case a.unlimited:
		c.note(a.field, "%s. %s", says, hint)
	default:
		c.differs(a.field, "%s. %s", says, hint)
	}
}

// controllerKeys takes out of keys (the run's labels or annotations) those that hold
// prefix: keys the source's controller reads (JobSet's exclusive placement, its node
// selector strategy), which do nothing on a run.
func (c *conversion) controllerKeys(field, prefix, controller string, keys map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if strings.Contains(k, prefix) {
			c.differs(field+"."+k, "%s reads it (e.g. to place each Job in a topology domain of its own); faultline's controller does not, "+
				"and a TrainingRun has no field for it: left out (a required pod affinity or node selector in spec.template places the pods)", controller)
			delete(keys, k)
		}
	}
}

// framework sets the run's framework: the user's, else want (the source's own), else a
// guess from the template.
func (c *conversion) framework(o Options, want string) {
	switch {
	case o.Framework != "":
		c.run.Spec.Framework = o.Framework
		return
	case want != "":
		c.run.Spec.Framework = want
		return
	}
	fw, why := guessFramework(&c.run.Spec.Template.Spec)
	c.run.Spec.Framework = fw
	if fw == v1alpha1.FrameworkNone {
		c.note("spec.framework", "none: the template keeps its own rendezvous (with the pod names rewritten); "+
			"pass --framework jax|pytorch|tensorflow to let faultline's plugin set it")
		return
	}
	c.note("spec.framework", "%s, since %s: its plugin adds the framework's rendezvous variables; the template's own variables of the same name win. "+
		"Pass --framework none to keep only the template's", fw, why)
}

var (
	torchrunRE = regexp.MustCompile(`\btorchrun\b|torch\.distributed\.(run|launch)\b`)
	jaxRE      = regexp.MustCompile(`(^|[/:_-])jax([/:_-]|$)|\bimport jax\b|jax\.distributed`)
	tfRE       = regexp.MustCompile(`(^|[/:_-])tensorflow([/:_-]|$)|\bimport tensorflow\b|TF_CONFIG`)
)

// guessFramework names the framework a pod template runs, and why, or "none".
func guessFramework(spec *corev1.PodSpec) (string, string) {
	for _, ct := range spec.Containers {
		text := strings.Join(append(append([]string{}, ct.Command...), ct.Args...), " ")
		switch {
		case torchrunRE.MatchString(text):
			return frameworkPyTorch, fmt.Sprintf("container %s starts torchrun", ct.Name)
		case jaxRE.MatchString(ct.Image) || jaxRE.MatchString(text):
			return frameworkJAX, fmt.Sprintf("container %s runs JAX (%s)", ct.Name, ct.Image)
		case tfRE.MatchString(ct.Image) || tfRE.MatchString(text):
			return frameworkTensorFlow, fmt.Sprintf("container %s runs TensorFlow (%s)", ct.Name, ct.Image)
		}
	}
	return v1alpha1.FrameworkNone, ""
}

// rename replaces the source's pod addresses with the run's in the containers' commands,
// arguments and variables, noting each. pattern's first submatch feeds index; the
// replacement is <run>-<index>.<run>, which resolves from any pod of the namespace.
func (c *conversion) rename(field string, pattern *regexp.Regexp, index func(m []string) (int, bool)) {
	run := c.run.Name
	seen := map[string]string{}
	var unmapped []string
	replace := func(s string) string {
		return pattern.ReplaceAllStringFunc(s, func(match string) string {
			i, ok := index(pattern.FindStringSubmatch(match))
			if !ok {
				unmapped = append(unmapped, match)
				return match
			}
			to := fmt.Sprintf("%s-%d.%s", run, i, run)
			seen[match] = to
			return to
		})
	}
	spec := &c.run.Spec.Template.Spec
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			ct := &list[i]
			for j := range ct.Command {
				ct.Command[j] = replace(ct.Command[j])
			}
			for j := range ct.Args {
				ct.Args[j] = replace(ct.Args[j])
			}
			for j := range ct.Env {
				ct.Env[j].Value = replace(ct.Env[j].Value)
			}
		}
	}
	froms := make([]string, 0, len(seen))
	for from := range seen {
		froms = append(froms, from)
	}
	sort.Strings(froms)
	for _, from := range froms {
		c.note(field, "the address %s is the run's %s (faultline names pod i <run>-i in the Service <run>)", from, seen[from])
	}
	for _, u := range unmapped {
		c.differs(field, "the address %s names no pod of the run: left as it is", u)
	}
}

// fieldRefs reports the template's variables that read a pod label or annotation of the
// source's controller (key prefix): faultline's pods do not have them.
func (c *conversion) fieldRefs(field, prefix, instead string) {
	spec := &c.run.Spec.Template.Spec
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, ct := range list {
			for _, e := range ct.Env {
				if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || !strings.Contains(e.ValueFrom.FieldRef.FieldPath, prefix) {
					continue
				}
				c.differs(fmt.Sprintf("%s.containers[%s].env[%s]", field, ct.Name, e.Name),
					"reads %s, which faultline's pods do not carry: %s", e.ValueFrom.FieldRef.FieldPath, instead)
			}
		}
	}
}

// mentions reports whether a container's command, arguments or variables name s.
func mentions(spec *corev1.PodSpec, s string) bool {
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, ct := range list {
			for _, v := range append(append([]string{}, ct.Command...), ct.Args...) {
				if strings.Contains(v, s) {
					return true
				}
			}
			for _, e := range ct.Env {
				if strings.Contains(e.Value, s) {
					return true
				}
			}
		}
	}
	return false
}

// addEnv adds a variable to every container that does not set it.
func addEnv(spec *corev1.PodSpec, name, value string) {
	for i := range spec.Containers {
		ct := &spec.Containers[i]
		found := false
		for _, e := range ct.Env {
			found = found || e.Name == name
		}
		if !found {
			ct.Env = append(ct.Env, corev1.EnvVar{Name: name, Value: value})
		}
	}
}

func setOption(run *v1alpha1.TrainingRun, k, v string) {
	if run.Spec.FrameworkOptions == nil {
		run.Spec.FrameworkOptions = map[string]string{}
	}
	run.Spec.FrameworkOptions[k] = v
}
