package agent

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slingshot-k8s/slingshot/controller"
	"github.com/slingshot-k8s/slingshot/controller/embedded"
	"github.com/slingshot-k8s/slingshot/controllerclient"
)

func openEmbedded(ctx context.Context, dir string, logger *slog.Logger, reg prometheus.Registerer) (EmbeddedController, error) {
	return embedded.Open(ctx, dir, controller.Config{Logger: logger, Registerer: reg})
}

// --controller=embedded runs the controller that Options.EmbeddedController
// opens, beside the client, and is refused without one.
func TestEmbeddedControllerLink(t *testing.T) {
	for _, tc := range []struct {
		name    string
		open    EmbeddedOpener
		wantErr error
	}{
		{"opened by the main", openEmbedded, nil},
		{"not in this binary", nil, ErrNoEmbeddedController},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{NodeName: "n1", Controller: "embedded", StateDir: t.TempDir(), EmbeddedController: tc.open}
			l, err := newLeaser(t.Context(), opts, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("newLeaser: %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- l.Run(ctx) }()
			lease, err := l.AcquireJobVNI(t.Context(), controllerclient.PodRef{Namespace: "a", Name: "p", UID: "u"})
			if err != nil || lease.VNI == 0 || lease.Scope != controllerclient.ScopePod {
				t.Errorf("AcquireJobVNI: %+v %v", lease, err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			if err := errors.Join(l.Close(), l.Close()); err != nil {
				t.Errorf("Close twice: %v", err)
			}
		})
	}
}
