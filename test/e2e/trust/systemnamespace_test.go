package trust

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
)

// systemNamespaces are those whose ServiceAccounts are the cluster's and faultline's own.
var systemNamespaces = []string{systemNamespace, metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease}

// TestE2EControllerCannotReachASystemNamespace: a pod runs with the token of a ServiceAccount
// of its namespace, so a way for the controller's token to put a pod into kube-system is a
// way to the tokens of the cluster's own controllers. Its RBAC lets it make pods and Jobs
// anywhere (the Job controller makes a Job's pods, which the controller's pod policy never
// sees), and nothing else that makes pods; admission (deploy/admission/controller.yaml,
// deploy/admission/jobs.yaml) refuses every way there, each refusal naming its rule: a pod,
// a Job, a Job controlled by a TrainingRun that is not there, a Job of a run that is not its
// run's or runs as another ServiceAccount, and, on a run's own Job, every change but the
// suspend and the finalizer drop the controller makes; nor may it touch a Job of no run. A run
// in a tenant's namespace still starts (its Job and its workers), and the controller's own
// Job writes still go through.
func TestE2EControllerCannotReachASystemNamespace(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	// Where no controller runs: the Jobs the test makes there stay as it made them.
	forged := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	asController := controllerClient(ctx, t, c)
	jobs := func(ns string) func(*batchv1.Job) error {
		return func(job *batchv1.Job) error {
			_, err := asController.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}
	}

	// Nothing else its roles let it write makes pods.
	requireNoOtherPodMakers(ctx, t, c)

	// A pod there.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "w-", Namespace: metav1.NamespaceSystem, Labels: map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelAttempt: "1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "llm", UID: "3e0f6f8e-0000-4000-8000-000000000002", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "worker", Image: "trainer:latest"}}},
	}
	_, err := asController.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	requireForbidden(t, "a worker in kube-system", err, "faultline-controller may not create pod kube-system/", "kube-system is a system namespace")

	// A Job there: a bare one, and one shaped as a run's (attempt.Job), controlled by a
	// TrainingRun of that namespace that does not exist, as a ServiceAccount of the namespace.
	bare := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "miner", Namespace: metav1.NamespaceSystem},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, ServiceAccountName: "generic-garbage-collector",
			Containers: []corev1.Container{{Name: "miner", Image: "attacker/miner:latest"}},
		}}},
	}
	requireForbidden(t, "a bare Job in kube-system", jobs(metav1.NamespaceSystem)(bare),
		"faultline-controller may not create Job kube-system/miner", "kube-system is a system namespace")
	for _, sys := range systemNamespaces {
		fake := runIn(sys, "llm", "3e0f6f8e-0000-4000-8000-000000000003")
		job := attempt.Job(fake, attempt.Options{Attempt: 1})
		job.Spec.Template.Spec.ServiceAccountName = "default"
		if sys == systemNamespace {
			job.Spec.Template.Spec.ServiceAccountName = controllerSA
		}
		requireForbidden(t, "a run's Job in "+sys+" controlled by a TrainingRun that is not there", jobs(sys)(job),
			"faultline-controller may not create Job "+sys+"/llm", sys+" is a system namespace")
	}

	// A legitimate run still starts: its Job is made, and its workers run.
	tr := runAsTenant(ctx, t, c, ns, "legit")
	legit, err := c.Client.BatchV1().Jobs(ns).Get(ctx, "legit", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Job of a running run: %v", err)
	}
	if !metav1.IsControlledBy(legit, tr.run) {
		t.Errorf("Job %s/%s is controlled by %v, want TrainingRun %s", ns, legit.Name, legit.OwnerReferences, tr.run.Name)
	}
	// What the controller does to its Jobs later (lifecycle's suspend, teardown's release).
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := asController.BatchV1().Jobs(ns).Patch(ctx, legit.Name, types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), dry); err != nil {
		t.Errorf("the controller suspending its run's Job: %v", err)
	}
	release := fmt.Sprintf(`{"metadata":{"uid":%q,"$deleteFromPrimitiveList/finalizers":[%q]}}`, legit.UID, v1alpha1.FinalizerAttemptJob)
	if _, err := asController.BatchV1().Jobs(ns).Patch(ctx, legit.Name, types.StrategicMergePatchType, []byte(release), dry); err != nil {
		t.Errorf("the controller dropping its run's Job's %s finalizer: %v", v1alpha1.FinalizerAttemptJob, err)
	}

	// A run of a namespace with no controller: the Jobs the controller's token may make for
	// it are the run's, as attempt.Job makes them, and nothing else.
	held := newRun("held", 2)
	held.Namespace = forged
	admin := clientFor(t, c.Config)
	if err := admin.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	other := attempt.Job(held, attempt.Options{Attempt: 1})
	other.Spec.Template.Spec.ServiceAccountName = "ci-deployer"
	// The API server reads the runs from an informer: wait until it has this one.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err = jobs(forged)(other.DeepCopy())
		return apierrors.IsForbidden(err), nil
	}); err != nil {
		t.Errorf("the controller never refused a Job of run %s/held as another ServiceAccount: %v", forged, err)
	}
	requireForbidden(t, "a run's Job as another ServiceAccount", err,
		"faultline-controller may not create Job "+forged+"/held with ServiceAccount ci-deployer",
		"the workers of TrainingRun "+forged+"/held run as the ServiceAccount its spec.template names (default, or held-workers)")
	for _, sa := range []string{"", "default", v1alpha1.WorkerAccessName(held.Name)} {
		job := attempt.Job(held, attempt.Options{Attempt: 1, ServiceAccountName: sa})
		if err := jobs(forged)(job); err != nil {
			t.Errorf("the controller creating the Job of run %s/held as ServiceAccount %q: %v", forged, sa, err)
		}
	}
	earlier := held.DeepCopy()
	earlier.UID = "3e0f6f8e-0000-4000-8000-000000000004"
	requireForbidden(t, "a Job of an earlier run of the same name", jobs(forged)(attempt.Job(earlier, attempt.Options{Attempt: 1})),
		"faultline-controller may not create Job "+forged+"/held", "it is not controlled by TrainingRun "+forged+"/held (uid "+string(held.UID)+")")
	orphan := attempt.Job(held, attempt.Options{Attempt: 1})
	orphan.OwnerReferences = nil
	requireForbidden(t, "a Job no run controls", jobs(forged)(orphan),
		"faultline-controller may not create Job "+forged+"/held", "it is no Job of a TrainingRun")
	renamed := attempt.Job(held, attempt.Options{Attempt: 1})
	renamed.Name = "held-2"
	requireForbidden(t, "a Job not named as its run", jobs(forged)(renamed),
		"faultline-controller may not create Job "+forged+"/held-2", "it is not the Job of its run")
	relabelled := attempt.Job(held, attempt.Options{Attempt: 1})
	relabelled.Labels[v1alpha1.LabelRun] = "legit"
	requireForbidden(t, "a Job labelled with another run", jobs(forged)(relabelled),
		"faultline-controller may not create Job "+forged+"/held", "it is not the Job of its run")

	// The run's Job, suspended and never started: the one state where the API server lets
	// the pod template's scheduling fields and metadata change.
	stored := attempt.Job(held, attempt.Options{Attempt: 1})
	stored.Finalizers = nil
	stored.Spec.ManagedBy = nil
	stored.Spec.Suspend = ptr.To(true)
	if _, err := c.Client.BatchV1().Jobs(forged).Create(ctx, stored, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = asController.BatchV1().Jobs(forged).Patch(ctx, "held", types.MergePatchType, []byte(`{"spec":{"template":{"spec":{"serviceAccountName":"ci-deployer"}}}}`), dry)
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		// The API server holds a Job's template's ServiceAccount immutable itself, before admission.
		t.Errorf("the controller giving its run's Job another ServiceAccount: got %v, want 422 or 403", err)
	}
	for what, patch := range map[string]struct{ body, want string }{
		"annotate the pod template":     {`{"spec":{"template":{"metadata":{"annotations":{"example.com/x":"y"}}}}}`, "may not change the pod template"},
		"move the pod template's nodes": {`{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":"control-plane"}}}}}`, "may not change the pod template"},
		"resume it":                     {`{"spec":{"suspend":false}}`, "but suspend it"},
		"raise its parallelism":         {`{"spec":{"parallelism":3}}`, "but suspend it"},
		"hand it to another run": {fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"faultline.dev/v1alpha1","kind":"TrainingRun","name":"legit","uid":%q,"controller":true}]}}`, tr.run.UID),
			"may not change the labels, owners or annotations"},
		"relabel it":          {`{"metadata":{"labels":{"faultline.dev/run":"legit"}}}`, "may not change the labels, owners or annotations"},
		"annotate it":         {`{"metadata":{"annotations":{"example.com/x":"y"}}}`, "may not change the labels, owners or annotations"},
		"add a finalizer":     {`{"metadata":{"finalizers":["example.com/hold"]}}`, "may not add or drop other finalizers"},
		"drop its controller": {`{"metadata":{"ownerReferences":null}}`, "may not change the labels, owners or annotations"},
	} {
		_, err := asController.BatchV1().Jobs(forged).Patch(ctx, "held", types.MergePatchType, []byte(patch.body), dry)
		requireForbidden(t, "the controller: "+what, err, "faultline-controller may not", "Job "+forged+"/held", patch.want)
	}

	// A Job of kube-system that is no run's: the controller may not change it at all.
	sysJob := bare.DeepCopy()
	sysJob.Name = ""
	sysJob.GenerateName = "faultline-trust-"
	sysJob.Spec.Template.Spec.ServiceAccountName = ""
	sysJob.Spec.Suspend = ptr.To(true)
	sysJob, err = c.Client.BatchV1().Jobs(metav1.NamespaceSystem).Create(ctx, sysJob, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.BatchV1().Jobs(metav1.NamespaceSystem).Delete(context.Background(), sysJob.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	})
	for what, patch := range map[string]string{
		"resuming":                   `{"spec":{"suspend":false}}`,
		"raising the parallelism of": `{"spec":{"parallelism":3}}`,
	} {
		_, err := asController.BatchV1().Jobs(metav1.NamespaceSystem).Patch(ctx, sysJob.Name, types.MergePatchType, []byte(patch), dry)
		requireForbidden(t, "the controller "+what+" a Job of kube-system", err,
			"faultline-controller may not change Job kube-system/"+sysJob.Name, "it is no Job of a TrainingRun")
	}
}

// runIn is a run of name in ns with uid, as the API server would return it.
func runIn(ns, name string, uid types.UID) *v1alpha1.TrainingRun {
	run := newRun(name, 2)
	run.Namespace = ns
	run.UID = uid
	return run
}

// requireNoOtherPodMakers fails the test if the controller's RBAC lets it create, update or
// patch in kube-system anything that makes pods but pods and Jobs (which admission guards):
// the built-in kinds with a pod template (a real dry-run creation of each is refused), the
// TrainingRun, and the training operators' kinds that pkg/convert reads.
func requireNoOtherPodMakers(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	_, cfg, err := c.ServiceAccountKubeconfig(ctx, systemNamespace, controllerSA, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	asController := clientFor(t, cfg)
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "miner"}},
		Spec:       corev1.PodSpec{ServiceAccountName: "generic-garbage-collector", Containers: []corev1.Container{{Name: "miner", Image: "attacker/miner:latest"}}},
	}
	sel := &metav1.LabelSelector{MatchLabels: tmpl.Labels}
	meta := metav1.ObjectMeta{Name: "miner", Namespace: metav1.NamespaceSystem}
	cronTmpl := batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl}}
	cronTmpl.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	for what, obj := range map[string]client.Object{
		"Deployment":            &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Selector: sel, Template: tmpl}},
		"DaemonSet":             &appsv1.DaemonSet{ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{Selector: sel, Template: tmpl}},
		"StatefulSet":           &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Selector: sel, Template: tmpl}},
		"ReplicaSet":            &appsv1.ReplicaSet{ObjectMeta: meta, Spec: appsv1.ReplicaSetSpec{Selector: sel, Template: tmpl}},
		"ReplicationController": &corev1.ReplicationController{ObjectMeta: meta, Spec: corev1.ReplicationControllerSpec{Selector: tmpl.Labels, Template: &tmpl}},
		"PodTemplate":           &corev1.PodTemplate{ObjectMeta: meta, Template: tmpl},
		"CronJob":               &batchv1.CronJob{ObjectMeta: meta, Spec: batchv1.CronJobSpec{Schedule: "* * * * *", JobTemplate: cronTmpl}},
		"TrainingRun":           runIn(metav1.NamespaceSystem, "miner", ""),
	} {
		err := asController.Create(ctx, obj, client.DryRunAll)
		if !apierrors.IsForbidden(err) {
			t.Errorf("the controller creating a %s in kube-system: got %v, want RBAC's 403", what, err)
		}
	}
	type resource struct{ group, resource string }
	for _, r := range []resource{
		{"", "replicationcontrollers"}, {"", "podtemplates"},
		{"apps", "deployments"}, {"apps", "daemonsets"}, {"apps", "statefulsets"}, {"apps", "replicasets"},
		{"batch", "cronjobs"},
		{v1alpha1.GroupName, "trainingruns"},
		{"jobset.x-k8s.io", "jobsets"}, {"kubeflow.org", "pytorchjobs"}, {"trainer.kubeflow.org", "trainjobs"},
		{"leaderworkerset.x-k8s.io", "leaderworkersets"}, {"ray.io", "rayjobs"}, {"ray.io", "rayclusters"},
	} {
		for _, verb := range []string{"create", "update", "patch"} {
			if r.resource == "trainingruns" && verb != "create" {
				continue // the controller's own kind: what it may patch is deploy/admission/controller.yaml's
			}
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: metav1.NamespaceSystem, Verb: verb, Group: r.group, Resource: r.resource},
			}}
			if err := asController.Create(ctx, review); err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed {
				t.Errorf("RBAC lets the controller %s %s.%s in kube-system: a way to pods there that no admission policy of faultline guards", verb, r.resource, r.group)
			}
		}
	}
}
