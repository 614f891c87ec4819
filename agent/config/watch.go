package config

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
)

// Watcher reloads a configuration file when it changes. A file that fails
// to parse is refused with a log line and a metric; the last good
// configuration stays in force.
//
// It watches the file's directory, not the file, because a Kubernetes
// ConfigMap volume replaces files by swapping a symlink.
type Watcher struct {
	path     string
	logger   *slog.Logger
	apply    func(Config)
	reloads  *prometheus.CounterVec
	last     []byte        // content of the last reload attempt
	readyCh  chan struct{} // tests: closed once the watch is set up
	notifyCh chan struct{} // tests: receives after every reload attempt
}

// NewWatcher returns a Watcher of path that calls apply with every new
// valid configuration. reg may be nil.
func NewWatcher(path string, logger *slog.Logger, reg prometheus.Registerer, apply func(Config)) (*Watcher, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{
		path:   path,
		logger: logger,
		apply:  apply,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slingshot_agent_config_reloads_total",
			Help: "Configuration reloads by result (ok or refused).",
		}, []string{"result"}),
	}
	if reg != nil {
		if err := reg.Register(w.reloads); err != nil {
			return nil, fmt.Errorf("register config metrics: %w", err)
		}
	}
	return w, nil
}

// Run watches until ctx ends. It returns an error only if the watch
// cannot be set up.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config watch: %w", err)
	}
	defer fw.Close()
	dir := filepath.Dir(w.path)
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("config watch %s: %w", dir, err)
	}
	if w.readyCh != nil {
		close(w.readyCh)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			w.logger.Warn("config watch error", "err", err)
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			// The file itself changing, or a ConfigMap volume swapping its
			// ..data symlink; other files in the directory do not matter.
			if name := filepath.Base(ev.Name); name != filepath.Base(w.path) && name != "..data" {
				continue
			}
			if ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) == 0 {
				continue
			}
			w.reload()
		}
	}
}

func (w *Watcher) reload() {
	data, err := os.ReadFile(w.path)
	if err != nil {
		// Mid-swap or removed: the next event brings the new file.
		w.logger.Warn("config file unreadable; keeping the previous configuration", "path", w.path, "err", err)
		return
	}
	if bytes.Equal(data, w.last) {
		return // one change raises several events
	}
	w.last = data
	defer func() {
		if w.notifyCh != nil {
			w.notifyCh <- struct{}{}
		}
	}()
	c, err := Parse(data)
	if err != nil {
		w.reloads.WithLabelValues("refused").Inc()
		w.logger.Error("configuration refused; keeping the previous one", "path", w.path, "err", err)
		return
	}
	w.reloads.WithLabelValues("ok").Inc()
	w.logger.Info("configuration reloaded", "path", w.path)
	w.apply(c)
}
