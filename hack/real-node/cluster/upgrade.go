package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// ControllerSelector selects the controller's pods, ControllerDeployment
// is its Deployment: the chart's names for the release ReleaseName.
const (
	ControllerSelector   = "app.kubernetes.io/component=controller"
	ControllerDeployment = ReleaseName + "-controller"
	// ControllerMetricsPort serves the controller's /metrics (the chart's
	// controller.ports.metrics), on the node's address (hostNetwork).
	ControllerMetricsPort = 9442
)

// controllerClaim is the PersistentVolume and the claim of
// Options.ControllerVolume, the chart's controller.persistence.existingClaim.
const controllerClaim = ReleaseName + "-controller-state"

// BuildInfoMetric is the metric the agent and the controller describe
// their build with.
const BuildInfoMetric = "slingshot_build_info"

// Upgrade moves the release to src's chart and images, with the node's
// chart values and over them over (SourceValues), as `helm upgrade` does
// (not --reuse-values: the values are all given), and returns the new
// revision. Like Helm's, its wait does not wait for a DaemonSet of one
// pod: WaitRuns does.
func (e *Env) Upgrade(ctx context.Context, src *Source, over map[string]any) (int, error) {
	rel := *e.Release
	rel.ChartDir, rel.Values = src.ChartDir, e.SourceValues(src, over)
	rev, err := rel.Upgrade(ctx)
	if err != nil {
		return 0, fmt.Errorf("upgrade to %s: %w\n%s", src, err, e.Describe(ctx))
	}
	return rev, nil
}

// Rollback rolls the release back to revision, as `helm rollback` does.
func (e *Env) Rollback(ctx context.Context, revision int) error {
	if err := e.Release.Rollback(revision); err != nil {
		return fmt.Errorf("%w\n%s", err, e.Describe(ctx))
	}
	return nil
}

// Revision is the release's current revision.
func (e *Env) Revision() (int, error) { return e.Release.Revision() }

// Kubectl runs the node's kubectl with args on the node's cluster and
// returns its output; its error carries the output.
func (e *Env) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.KubectlPath(), append([]string{"--kubeconfig", e.Node.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ApplyCRDs applies src's CRDs as docs/upgrade.md's first step does
// (`kubectl apply -f`): Helm installs a chart's crds/ on the first
// install only, and never upgrades them.
func (e *Env) ApplyCRDs(ctx context.Context, src *Source) error {
	_, err := e.Kubectl(ctx, "apply", "-f", filepath.Join(src.ChartDir, "crds"))
	return err
}

// PauseController and ResumeController pause and resume the controller's
// rollout (`kubectl rollout pause|resume`): a paused Deployment takes the
// chart's changes and replaces no pod until resumed, which is how
// docs/upgrade.md holds the controller back while the agents roll back.
func (e *Env) PauseController(ctx context.Context) error {
	_, err := e.Kubectl(ctx, "-n", Namespace, "rollout", "pause", "deployment/"+ControllerDeployment)
	return err
}

// ResumeController: see PauseController. Resuming a Deployment that is
// not paused is no error.
func (e *Env) ResumeController(ctx context.Context) error {
	d, err := e.Node.Client.AppsV1().Deployments(Namespace).Get(ctx, ControllerDeployment, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !d.Spec.Paused {
		return nil
	}
	_, err = e.Kubectl(ctx, "-n", Namespace, "rollout", "resume", "deployment/"+ControllerDeployment)
	return err
}

// WaitRuns waits (up to three minutes) until every node's agent runs
// agent's build and the controller runs controller's: each of their pods
// is Ready, not terminating, on the build's image, and its
// slingshot_build_info names the build's version and commit. A container
// of theirs in CrashLoopBackOff ends the wait at once: a build that
// cannot start (a checkpoint or a store it refuses) does not come up by
// waiting, and its log is in the error.
func (e *Env) WaitRuns(ctx context.Context, agent, controller *Source) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		last, err = e.runs(ctx, agent, controller)
		return last == "", err
	})
	if err != nil && last != "" {
		err = fmt.Errorf("%w (last: %s)", err, last)
	}
	if err != nil {
		return fmt.Errorf("the agent of %s and the controller of %s running: %w\n%s", agent, controller, err, e.Describe(ctx))
	}
	return nil
}

// runs says how the running agents and controller differ from the
// builds agent and controller, "" when they do not; its error is a
// container in CrashLoopBackOff.
func (e *Env) runs(ctx context.Context, agent, controller *Source) (string, error) {
	c := e.Node.Client.CoreV1().Pods(Namespace)
	agents, err := c.List(ctx, metav1.ListOptions{LabelSelector: AgentSelector})
	if err != nil {
		return err.Error(), nil
	}
	ctrls, err := c.List(ctx, metav1.ListOptions{LabelSelector: ControllerSelector})
	if err != nil {
		return err.Error(), nil
	}
	for _, p := range append(agents.Items, ctrls.Items...) {
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
				return "", fmt.Errorf("pod %s: container %s in CrashLoopBackOff (%d restarts)", p.Name, cs.Name, cs.RestartCount)
			}
		}
	}
	if len(agents.Items) != len(e.Nodes()) {
		return fmt.Sprintf("%d agent pods, want %d", len(agents.Items), len(e.Nodes())), nil
	}
	if len(ctrls.Items) == 0 {
		return "no controller pod", nil
	}
	check := func(pods []corev1.Pod, container string, src *Source, image string, port int) string {
		for _, p := range pods {
			if what := runsImage(&p, container, image); what != "" {
				return what
			}
			info, err := BuildInfo(ctx, fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, port))
			if err != nil {
				return fmt.Sprintf("pod %s: %v", p.Name, err)
			}
			if info["version"] != src.Version || info["commit"] != src.Commit {
				return fmt.Sprintf("pod %s: %s %v, want %s's version %s and commit %s", p.Name, BuildInfoMetric, info, src, src.Version, src.Commit)
			}
		}
		return ""
	}
	if what := check(agents.Items, "agent", agent, agent.AgentImage(), AgentPort); what != "" {
		return what, nil
	}
	return check(ctrls.Items, "controller", controller, controller.ControllerImage(), ControllerMetricsPort), nil
}

// runsImage says how the pod differs from one that is Ready, not
// terminating, with its container running image; "" when it does not.
func runsImage(p *corev1.Pod, container, image string) string {
	if p.DeletionTimestamp != nil {
		return fmt.Sprintf("pod %s terminating", p.Name)
	}
	for _, c := range p.Spec.Containers {
		if c.Name == container && c.Image != image {
			return fmt.Sprintf("pod %s: container %s on image %s, want %s", p.Name, container, c.Image, image)
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
			return ""
		}
	}
	return fmt.Sprintf("pod %s not ready (%s %s)", p.Name, p.Status.Phase, containerStates(*p))
}

// BuildInfo reads the labels of slingshot_build_info from the /metrics
// at url: what the binary serving it says of its build.
func BuildInfo(ctx context.Context, url string) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	ms := families[BuildInfoMetric].GetMetric()
	if len(ms) != 1 {
		return nil, fmt.Errorf("%s: %d series of %s, want 1", url, len(ms), BuildInfoMetric)
	}
	labels := map[string]string{}
	for _, l := range ms[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels, nil
}

// createControllerVolume makes Options.ControllerVolume's
// PersistentVolume, a directory under the first node's root, and its
// claim in Namespace, bound to each other from the start (no storage
// provisioner runs here).
func (e *Env) createControllerVolume(ctx context.Context) error {
	dir := filepath.Join(filepath.Dir(e.StateDir), "controller-state")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	// The controller runs as 65532 (the chart's securityContext), and a
	// hostPath volume keeps its directory's owner.
	if err := os.Chown(dir, 65532, 65532); err != nil {
		return err
	}
	if err := e.ensureNamespace(ctx); err != nil {
		return err
	}
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	rwo := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: controllerClaim},
		Spec: corev1.PersistentVolumeSpec{
			Capacity: size, AccessModes: rwo,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: e.Node.NodePath(dir), Type: ptr.To(corev1.HostPathDirectory),
			}},
			ClaimRef: &corev1.ObjectReference{Namespace: Namespace, Name: controllerClaim},
		},
	}
	if _, err := e.Node.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("controller volume: %w", err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: controllerClaim, Namespace: Namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: rwo, StorageClassName: ptr.To(""), VolumeName: controllerClaim,
			Resources: corev1.VolumeResourceRequirements{Requests: size},
		},
	}
	if _, err := e.Node.Client.CoreV1().PersistentVolumeClaims(Namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("controller volume's claim: %w", err)
	}
	return nil
}

// ensureNamespace makes the release's namespace unless it exists; Helm's
// install takes the namespace as it finds it.
func (e *Env) ensureNamespace(ctx context.Context) error {
	_, err := e.Node.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", Namespace, err)
	}
	return nil
}
