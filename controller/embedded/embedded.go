package embedded

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/slingshot-k8s/slingshot/controller"
	apiv1 "github.com/slingshot-k8s/slingshot/controller/api/v1"
	"github.com/slingshot-k8s/slingshot/controller/grpcapi"
	"github.com/slingshot-k8s/slingshot/controller/store/sqlite"
)

// DBName is the database's file name in the directory Open is given.
const DBName = "controller.db"

// Controller is an in-process controller and its store.
type Controller struct {
	svc  *controller.Allocator
	st   *sqlite.Store
	api  apiv1.ControllerClient
	once sync.Once
	err  error
}

// Open opens (or creates) the sqlite database in dir and builds the
// controller over it; nothing runs until Run. Errors wrap the directory's,
// the database's or the configuration's.
func Open(ctx context.Context, dir string, cfg controller.Config) (*Controller, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded controller: state dir: %w", err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(dir, DBName))
	if err != nil {
		return nil, fmt.Errorf("embedded controller: %w", err)
	}
	svc, err := controller.New(st, nil, nil, cfg)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("embedded controller: %w", err)
	}
	return &Controller{svc: svc, st: st, api: grpcapi.NewLocalClient(grpcapi.NewServer(svc, cfg.SliceTTL))}, nil
}

// API returns the controller's API, called in-process: the same requests,
// answers and status codes as over gRPC, with no authentication.
func (c *Controller) API() apiv1.ControllerClient { return c.api }

// Run loads the state and runs the controller's commits and sweeps until
// ctx ends; it returns nil then, or the error that stopped it.
func (c *Controller) Run(ctx context.Context) error { return c.svc.Run(ctx) }

// Loaded is closed once Run has loaded the state; calls before that are
// answered Unavailable.
func (c *Controller) Loaded() <-chan struct{} { return c.svc.Loaded() }

// Close closes the database; call it after Run has returned.
func (c *Controller) Close() error {
	c.once.Do(func() { c.err = c.st.Close() })
	return c.err
}
