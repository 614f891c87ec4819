// Package embedded runs the controller in-process, for a node agent with
// no cluster controller (slingshot-agent --controller=embedded): a
// [controller.Allocator] over its sqlite store in a directory, called through
// the wire API's client interface with no network and no authentication.
//
// It is assembled here, from the controller's own packages, so that the
// agent's controller client stays a wire client: only an agent binary
// built with the embedded_controller tag links this package, and with it
// the controller and sqlite (see cmd/slingshot-agent).
//
//	ec, err := embedded.Open(ctx, filepath.Join(stateDir, "controller"), controller.Config{})
//	defer ec.Close()           // after Run has returned
//	go ec.Run(ctx)             // the controller's commits and sweeps; must run
//	c, err := controllerclient.New(ec.API(), opts)
//
// There is no Kubernetes API in-process, so every VNI is pod-scoped (from
// the pod VNI range if one is configured, else from the main range).
//
// A Controller is safe for concurrent use; Close is safe to call twice.
package embedded
