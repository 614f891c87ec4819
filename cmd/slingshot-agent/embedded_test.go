//go:build embedded_controller

package main

import (
	"context"
	"log/slog"
	"testing"

	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/embedded"
)

// A binary built with the tag opens a working controller in the state
// directory: a pod's VNI is leased through the in-process API.
func TestEmbeddedControllerWithTheBuildTag(t *testing.T) {
	ec, err := embeddedController(t.Context(), t.TempDir(), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ec.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := ec.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	<-ec.(*embedded.Controller).Loaded()
	l, err := ec.API().AcquireJobVNI(t.Context(), &apiv1.AcquireJobVNIRequest{
		Pod: &apiv1.PodRef{Namespace: "a", Name: "p", Uid: "u"}, Node: "n1"})
	if err != nil || l.GetVni() == 0 {
		t.Fatalf("AcquireJobVNI: %v %v", l, err)
	}
}
