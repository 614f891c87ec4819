package devplugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/slingshot-k8s/slingshot/agent/cdispec"
	"github.com/slingshot-k8s/slingshot/internal/atomicfile"
	"github.com/slingshot-k8s/slingshot/internal/keylock"
)

// EnvFileName is the file in the per-container directory that holds the
// late-bound environment.
const EnvFileName = "slingshot.env"

// allocFiles are the files that carry an allocation's late-bound values
// into its containers: the per-allocation directory's env file and the
// CDI spec, both named by the allocation (its devices, see
// cdispec.AllocationKey). Pods that hold the same devices one after the
// other share them, so the writes and removals of one allocation's files
// are ordered by its lock.
type allocFiles struct {
	dir   string          // per-allocation directories
	cdi   *cdispec.Writer // nil when CDI is off
	locks keylock.Set     // by allocation key
}

// hostPath is the allocation's directory on the host.
func (f *allocFiles) hostPath(key string) string { return filepath.Join(f.dir, key) }

// cdiDevice is the allocation's CDI device name; false when CDI is off.
func (f *allocFiles) cdiDevice(key string) (string, bool) {
	if f.cdi == nil {
		return "", false
	}
	return f.cdi.DeviceName(key), true
}

// publish writes env where the allocation's containers find it.
func (f *allocFiles) publish(key string, env []string) error {
	unlock := f.locks.Lock(key)
	defer unlock()
	dir := f.hostPath(key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("per-container directory: %w", err)
	}
	var content strings.Builder
	for _, kv := range env {
		content.WriteString(kv + "\n")
	}
	// Atomic but not synced: after a power loss the container is gone too,
	// and a restart republishes.
	if err := atomicfile.Replace(filepath.Join(dir, EnvFileName), []byte(content.String()), 0o644); err != nil {
		return fmt.Errorf("publish environment: %w", err)
	}
	if f.cdi != nil {
		// Only the environment: Allocate already mapped the device nodes.
		if err := f.cdi.Write(key, cdispec.Edits{Env: env}); err != nil {
			return err
		}
	}
	return nil
}

// remove removes the allocation's files unless inUse, asked under the
// allocation's lock, says another pod holds the same devices by now.
func (f *allocFiles) remove(key string, inUse func() bool) error {
	unlock := f.locks.Lock(key)
	defer unlock()
	if inUse() {
		return nil
	}
	var errs []error
	if err := os.RemoveAll(f.hostPath(key)); err != nil {
		errs = append(errs, fmt.Errorf("remove per-container directory: %w", err))
	}
	if f.cdi != nil {
		if err := f.cdi.Remove(key); err != nil {
			errs = append(errs, fmt.Errorf("remove CDI spec: %w", err))
		}
	}
	return errors.Join(errs...)
}
