// Command mock-sysfs writes a mock sysfs, procfs and /dev tree of a node with
// HPE Slingshot NICs and GPUs, for development and tests without hardware.
//
//	go run ./hack/mock-sysfs --out /tmp/node --nics 8 --numa-nodes 2 --gpus 8
//
// The layout and every value are documented in internal/mocksysfs.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/slingshot-k8s/slingshot/internal/mocksysfs"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, new(usageError)):
		fmt.Fprintf(os.Stderr, "mock-sysfs: %v\nRun 'mock-sysfs --help' for usage.\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "mock-sysfs: %v\n", err)
		os.Exit(1)
	}
}

// usageError is a bad command line, as opposed to a failure to write.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

const usageText = `Usage: mock-sysfs --out DIR [flags]

Writes a mock of a Slingshot node under DIR, which must not exist or be empty:

  DIR/sys   sysfs root: PCI tree (devices/pci*), class/{cxi,cxi_user,net,drm},
            bus/pci, devices/system/node; pass it as --sysfs-root
  DIR/proc  procfs root: driver/nvidia/gpus/<bdf>/information
  DIR/dev   empty placeholders for cxiN, nvidiaN, nvidiactl, nvidia-uvm, kfd,
            dri/renderD<N>; pass it as --dev-root

NICs and GPUs are spread evenly over the NUMA nodes; a NIC and a GPU of the same
node share a PCIe root complex, so the nearest NIC of each GPU is defined. hsnN
names are shuffled (never in cxiN order). The same flags always write the same tree.

Flags:
`

const faultHelp = `inject a fault; repeatable. Forms:
  link-down:cxiN              properties/link 0, netdev down
  no-retry-handler:cxiN       properties/pct_eq 0
  missing:cxiN:RELPATH        remove a file, link or directory
  garbage:cxiN:RELPATH[=VAL]  overwrite a file (default: bytes no parser accepts)
RELPATH is relative to class/cxi/cxiN ("device/properties/nid", "device" for the
link itself), or to the NIC's netdev when it starts with "netdev/" ("netdev/operstate")`

type faultList []mocksysfs.Fault

func (l *faultList) String() string {
	s := make([]string, len(*l))
	for i, f := range *l {
		s[i] = f.String()
	}
	return strings.Join(s, ",")
}

func (l *faultList) Set(v string) error {
	f, err := mocksysfs.ParseFault(v)
	if err != nil {
		return err
	}
	*l = append(*l, f)
	return nil
}

func run(args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("mock-sysfs", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var (
		spec   mocksysfs.Spec
		out    string
		models string
		faults faultList
		asJSON bool
	)
	fl.StringVar(&out, "out", "", "output `DIR` (required); gets sys/, proc/ and dev/")
	fl.IntVar(&spec.NICs, "nics", 4, fmt.Sprintf("number of NIC physical functions (0-%d)", mocksysfs.MaxNICs))
	fl.IntVar(&spec.NUMANodes, "numa-nodes", 2, fmt.Sprintf("number of NUMA nodes (1-%d)", mocksysfs.MaxNUMANodes))
	fl.IntVar(&spec.GPUs, "gpus", 0, fmt.Sprintf("number of GPUs (0-%d)", mocksysfs.MaxGPUs))
	fl.StringVar(&spec.GPUVendor, "gpu-vendor", "", "GPU `vendor`: nvidia or amd (default nvidia unless --gpu-model says)")
	fl.StringVar(&models, "gpu-model", "", "comma-separated GPU `models`, assigned in turn (known: "+knownModels()+
		"; default h100 for nvidia, mi250x for amd)")
	fl.StringVar(&spec.Generation, "generation", mocksysfs.Cassini2, "NIC generation: cassini2 or cassini1")
	fl.IntVar(&spec.VFsPerNIC, "vfs-per-nic", 0, fmt.Sprintf("SR-IOV virtual functions per NIC, Cassini-1 or 2 (0-%d); they become cxiN after the PFs", mocksysfs.MaxVFsPerNIC))
	fl.Int64Var(&spec.Seed, "seed", 1, "seed for the hsn shuffle, NIDs and GPU UUIDs")
	fl.Var(&faults, "fault", faultHelp)
	fl.BoolVar(&asJSON, "json", false, "print what was written as JSON instead of tables")
	fl.Usage = func() {
		fmt.Fprint(fl.Output(), usageText)
		fl.PrintDefaults()
		fmt.Fprint(fl.Output(), "\nExample:\n  go run ./hack/mock-sysfs --out /tmp/node --nics 8 --numa-nodes 2 --gpus 8 \\\n"+
			"      --gpu-model h100 --fault link-down:cxi3 --fault garbage:cxi5:device/properties/nid\n")
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fl.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q (all options are flags)", fl.Arg(0))}
	}
	if out == "" {
		return usageError{errors.New("--out DIR is required")}
	}
	if spec.NUMANodes < 1 { // the Spec reads 0 as "one node"; on the command line it is a mistake
		return usageError{fmt.Errorf("numa-nodes must be 1 to %d, not %d", mocksysfs.MaxNUMANodes, spec.NUMANodes)}
	}
	if models != "" {
		spec.GPUModels = strings.Split(models, ",")
	}
	spec.Faults = faults
	if err := spec.Validate(); err != nil {
		return usageError{err}
	}
	truth, err := mocksysfs.Write(out, spec)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(truth)
	}
	return printTruth(stdout, truth)
}

func knownModels() string {
	keys := make([]string, len(mocksysfs.GPUModels))
	for i, m := range mocksysfs.GPUModels {
		keys[i] = m.Key
	}
	return strings.Join(keys, ", ")
}

func printTruth(w io.Writer, t *mocksysfs.Truth) error {
	fmt.Fprintf(w, "wrote %s: %d files, %d links, %d directories\n", t.Dir, t.Files, t.Links, t.Dirs)
	fmt.Fprintf(w, "  sysfs root %s\n  procfs root %s\n  dev root %s\n\n", t.SysRoot, t.ProcRoot, t.DevRoot)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(t.NICs) > 0 {
		fmt.Fprintln(tw, "NIC\tPCI\tID\tNUMA\tROOT\tNETDEV\tMAC\tNID\tLINK\tFAULTS")
		for _, n := range t.NICs {
			netdev, mac := n.NetDev, n.MAC
			if netdev == "" {
				netdev, mac = "-", "(vf of "+n.PhysFn+")"
			}
			link := "up"
			if !n.Properties.Link {
				link = "down"
			}
			fmt.Fprintf(tw, "%s\t%s\t%04x:%04x\t%d\t%s\t%s\t%s\t0x%x\t%s\t%s\n", n.Name, n.PCIAddress,
				n.VendorID, n.DeviceID, n.NUMANode, n.RootComplex, netdev, mac, n.Properties.NID, link,
				faultsText(n.Faults))
		}
		fmt.Fprintln(tw)
	}
	if len(t.GPUs) > 0 {
		fmt.Fprintln(tw, "GPU\tBDF\tMODEL\tNUMA\tROOT\tNEAREST NIC\tDEVICE NODES")
		for i, g := range t.GPUs {
			nearest := g.NearestNIC
			if nearest == "" {
				nearest = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", i, g.BDF, g.ProductName, g.NUMANode,
				g.RootComplex, nearest, strings.Join(append(append([]string(nil), g.DevNodes...), g.SharedDevNodes...), " "))
		}
	}
	return tw.Flush()
}

func faultsText(fs []mocksysfs.Fault) string {
	if len(fs) == 0 {
		return "-"
	}
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = f.String()
	}
	return strings.Join(s, " ")
}
