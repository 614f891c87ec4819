// Command cxi-sim inspects and pokes the simulated CXI driver (package
// cxi/sim) whose state a directory holds, as an agent started with
// --cxi-driver=sim leaves it.
//
//	go run ./hack/cxi-sim --state DIR [--device cxi0] list
//	go run ./hack/cxi-sim --state DIR [--device cxi0] in-use ID LNIS
//	go run ./hack/cxi-sim --state DIR [--device cxi0] enable|disable ID
//
// list prints the services like the driver's debugfs file
// /sys/kernel/debug/cxi/cxiN/services. in-use records that LNIS LNIs use
// service ID (0 releases it), so that destroying it fails with EBUSY, as
// it would while a process still runs on a real NIC. enable and disable
// send SVC_ENABLE as `cxi_service enable|disable -s ID` does: `enable 1`
// opens the default service, which the agent then reports.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/slingshot-k8s/slingshot/cxi/sim"
	"github.com/slingshot-k8s/slingshot/cxi/uapi"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "cxi-sim: %v\n", err)
		}
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cxi-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state", "", "directory holding the simulated NICs' state (required)")
	device := fs.String("device", "cxi0", "simulated device name")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: cxi-sim --state DIR [--device cxiN] list | in-use ID LNIS | enable ID | disable ID\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *stateDir == "" {
		fs.Usage()
		return errors.New("--state is required")
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("no command")
	}
	dev, err := sim.Open(*stateDir, *device, sim.Options{})
	if err != nil {
		return err
	}
	defer dev.Close()

	switch rest[0] {
	case "list":
		if len(rest) != 1 {
			return errors.New("list takes no arguments")
		}
		return dev.WriteDebugServices(stdout)
	case "in-use":
		if len(rest) != 3 {
			return errors.New("usage: in-use ID LNIS")
		}
		id, err := strconv.ParseUint(rest[1], 10, 32)
		if err != nil {
			return fmt.Errorf("service ID %q: %w", rest[1], err)
		}
		lnis, err := strconv.Atoi(rest[2])
		if err != nil {
			return fmt.Errorf("LNI count %q: %w", rest[2], err)
		}
		if err := dev.SetInUse(uint32(id), lnis); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "service %d on %s: %d LNIs\n", id, *device, lnis)
		return nil
	case "enable", "disable":
		if len(rest) != 2 {
			return fmt.Errorf("usage: %s ID", rest[0])
		}
		id, err := strconv.ParseUint(rest[1], 10, 32)
		if err != nil {
			return fmt.Errorf("service ID %q: %w", rest[1], err)
		}
		if err := uapi.NewDevice(dev).EnableService(uint32(id), rest[0] == "enable"); err != nil {
			return fmt.Errorf("%s service %d on %s: %w", rest[0], id, *device, err)
		}
		fmt.Fprintf(stdout, "service %d on %s: %sd\n", id, *device, rest[0])
		return nil
	}
	fs.Usage()
	return fmt.Errorf("unknown command %q", rest[0])
}
