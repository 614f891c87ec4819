// Package install puts the project on a cluster the way a user does: with
// its own Helm chart, through Helm's Go library.
package install

import (
	"context"
	"fmt"
	"io"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Release is one install of the chart.
type Release struct {
	// Kubeconfig reaches the cluster; ChartDir is deploy/helm/slingshot.
	Kubeconfig, ChartDir string
	Name, Namespace      string
	// Values are the chart values, as a values file would give them.
	Values map[string]any
	// Timeout bounds the wait for the release's workloads to be ready.
	Timeout time.Duration
	// Logf receives Helm's debug log; nil: discarded.
	Logf func(format string, args ...any)
}

func (r *Release) config() (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &r.Kubeconfig
	flags.Namespace = &r.Namespace
	logf := r.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, r.Namespace, "secret", logf); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return cfg, nil
}

// Install installs the chart into its namespace (made when missing) and
// waits until its Deployments and DaemonSets are ready.
func (r *Release) Install(ctx context.Context) error {
	chart, err := loader.Load(r.ChartDir)
	if err != nil {
		return fmt.Errorf("load chart %s: %w", r.ChartDir, err)
	}
	cfg, err := r.config()
	if err != nil {
		return err
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = r.Name, r.Namespace, true
	inst.Wait, inst.Timeout = true, r.Timeout
	if _, err := inst.RunWithContext(ctx, chart, r.Values); err != nil {
		return fmt.Errorf("helm install %s: %w", r.Name, err)
	}
	return nil
}

// Upgrade moves the release to the chart in ChartDir with Values, as
// `helm upgrade --wait` does without --reuse-values (Values are all the
// values the release gets), and returns the release's new revision.
// Helm's wait takes a DaemonSet whose one pod may be unavailable for
// ready at once: callers wait for the agent themselves.
func (r *Release) Upgrade(ctx context.Context) (int, error) {
	chart, err := loader.Load(r.ChartDir)
	if err != nil {
		return 0, fmt.Errorf("load chart %s: %w", r.ChartDir, err)
	}
	cfg, err := r.config()
	if err != nil {
		return 0, err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace = r.Namespace
	up.Wait, up.Timeout = true, r.Timeout
	rel, err := up.RunWithContext(ctx, r.Name, chart, r.Values)
	if err != nil {
		return 0, fmt.Errorf("helm upgrade %s (chart %s): %w", r.Name, r.ChartDir, err)
	}
	return rel.Version, nil
}

// Rollback rolls the release back to revision, as `helm rollback NAME
// REVISION --wait` does: the manifests and values of that revision,
// applied as a new revision. Helm's rollback takes no context; Timeout
// bounds its wait.
func (r *Release) Rollback(revision int) error {
	cfg, err := r.config()
	if err != nil {
		return err
	}
	rb := action.NewRollback(cfg)
	rb.Version = revision
	rb.Wait, rb.Timeout = true, r.Timeout
	if err := rb.Run(r.Name); err != nil {
		return fmt.Errorf("helm rollback %s %d: %w", r.Name, revision, err)
	}
	return nil
}

// Revision returns the release's current revision (helm status).
func (r *Release) Revision() (int, error) {
	cfg, err := r.config()
	if err != nil {
		return 0, err
	}
	rel, err := action.NewStatus(cfg).Run(r.Name)
	if err != nil {
		return 0, fmt.Errorf("helm status %s: %w", r.Name, err)
	}
	return rel.Version, nil
}

// ChartValues returns the chart's default values (its values.yaml).
func ChartValues(chartDir string) (map[string]any, error) {
	chart, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	return chart.Values, nil
}

// Render returns the manifests Install would apply, rendered without a
// cluster for Kubernetes kubeVersion
// ("v1.37.1").
func (r *Release) Render(ctx context.Context, kubeVersion string) (string, error) {
	chart, err := loader.Load(r.ChartDir)
	if err != nil {
		return "", fmt.Errorf("load chart %s: %w", r.ChartDir, err)
	}
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return "", err
	}
	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: chartutil.DefaultCapabilities.Copy(),
		Log:          func(string, ...any) {},
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = r.Name, r.Namespace
	inst.DryRun, inst.ClientOnly, inst.KubeVersion = true, true, kv
	rel, err := inst.RunWithContext(ctx, chart, r.Values)
	if err != nil {
		return "", fmt.Errorf("helm template %s: %w", r.Name, err)
	}
	return rel.Manifest, nil
}
