package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	resourceac "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/slingshot-k8s/slingshot/internal/backoff"
)

// DeviceData is what a prepared claim's device got, written as the
// device's status.devices[].data so that `kubectl get resourceclaim -o
// yaml` shows it.
type DeviceData struct {
	// NIC is the device, "cxi0".
	NIC string `json:"nic"`
	// ServiceIDs are the CXI services made on it for the claim.
	ServiceIDs []uint32 `json:"serviceIDs,omitempty"`
	// VNIs are the services' VNIs, the job's first.
	VNIs []uint16 `json:"vnis,omitempty"`
	// TrafficClasses are the classes the services admit.
	TrafficClasses []string `json:"trafficClasses,omitempty"`
}

// NetworkData is the pod's hsn interface on a device, written as the
// device's status.devices[].networkData (KEP-4817), where Kubernetes
// shows a pod's interfaces.
type NetworkData struct {
	// Interface is its name in the pod, "hsn0".
	Interface string
	// IPs are its addresses with their prefix length, "10.150.0.3/16".
	IPs []string
	// HardwareAddress is its MAC address; "" if not known.
	HardwareAddress string
}

// DeviceStatus is one allocated device's entry in the claim's status.
type DeviceStatus struct {
	Pool, Device string
	// ShareID is the claim's share of a shared device; "" for none.
	ShareID string
	Data    DeviceData
	// Network is the pod's hsn interface on the device; nil: none.
	Network *NetworkData
}

// ClaimStatus is what is written into one claim's status.
type ClaimStatus struct {
	Namespace, Name, UID string
	Devices              []DeviceStatus
}

// ClaimStatusWriter writes a claim's status.devices entries of this
// driver's devices, and only those; APIClaimStatus is one.
type ClaimStatusWriter interface {
	WriteClaimStatus(ctx context.Context, st ClaimStatus) error
}

// APIClaimStatus writes through the API server with server-side apply,
// as the driver's field manager: status.devices is a map list keyed by
// driver, pool, device and share, so the entries applied are this
// driver's alone and another driver's entries of the same claim stay
// theirs.
type APIClaimStatus struct {
	Client kubernetes.Interface
	Driver string
}

// WriteClaimStatus applies st's entries, on the claim of st.UID only (a
// claim made again under the same name is not written).
func (a APIClaimStatus) WriteClaimStatus(ctx context.Context, st ClaimStatus) error {
	status := resourceac.ResourceClaimStatus()
	for _, d := range st.Devices {
		raw, err := json.Marshal(d.Data)
		if err != nil {
			return fmt.Errorf("claim %s/%s: device %s data: %w", st.Namespace, st.Name, d.Device, err)
		}
		dev := resourceac.AllocatedDeviceStatus().
			WithDriver(a.Driver).WithPool(d.Pool).WithDevice(d.Device).
			WithData(runtime.RawExtension{Raw: raw})
		if d.ShareID != "" {
			// The entry's key is driver, pool, device and share.
			dev.WithShareID(d.ShareID)
		}
		if n := d.Network; n != nil {
			nd := resourceac.NetworkDeviceData().WithInterfaceName(n.Interface).WithIPs(n.IPs...)
			if n.HardwareAddress != "" {
				nd.WithHardwareAddress(n.HardwareAddress)
			}
			dev.WithNetworkData(nd)
		}
		status.WithDevices(dev)
	}
	ac := resourceac.ResourceClaim(st.Name, st.Namespace).WithUID(types.UID(st.UID)).WithStatus(status)
	if _, err := a.Client.ResourceV1().ResourceClaims(st.Namespace).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: a.Driver, Force: true}); err != nil {
		return fmt.Errorf("write the status of claim %s/%s: %w", st.Namespace, st.Name, err)
	}
	return nil
}

// statusAttempts bounds the writes of one claim's status; statusTimeout
// one write.
const (
	statusAttempts = 3
	statusTimeout  = 10 * time.Second
)

// StatusQueue writes the claims' statuses off the kubelet's path: Prepare
// and the bind only queue the latest status of a claim, and Run writes
// them, each at most statusAttempts times. The status is informational:
// a write that fails is logged and counted, and fails nothing. Safe for
// concurrent use; Run is its one writer.
type StatusQueue struct {
	w   ClaimStatusWriter
	log *slog.Logger
	m   *Metrics
	// retry paces the rounds after one with failures.
	retry backoff.Policy

	mu      sync.Mutex
	pending map[string]queued // by claim UID: the latest status only
	kick    chan struct{}
}

type queued struct {
	st       ClaimStatus
	attempts int
}

// NewStatusQueue writes through w.
func NewStatusQueue(w ClaimStatusWriter, log *slog.Logger, m *Metrics) *StatusQueue {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &StatusQueue{w: w, log: log, m: m, pending: map[string]queued{}, kick: make(chan struct{}, 1),
		retry: backoff.Policy{Initial: time.Second, Max: 10 * time.Second, Factor: 2, Jitter: 0.2}}
}

// enqueue replaces what is queued for the claim with st.
func (q *StatusQueue) enqueue(st ClaimStatus) {
	if q == nil {
		return
	}
	q.mu.Lock()
	q.pending[st.UID] = queued{st: st}
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Run writes what is queued until ctx ends; a round with failures is
// followed by a pause before the retries.
func (q *StatusQueue) Run(ctx context.Context) error {
	for round := 0; ; {
		select {
		case <-ctx.Done():
			return nil
		case <-q.kick:
		}
		if !q.drain(ctx) {
			round = 0
			continue
		}
		if err := backoff.Sleep(ctx, q.retry.Delay(min(round, 4))); err != nil {
			return nil
		}
		round++
		q.poke()
	}
}

func (q *StatusQueue) poke() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// drain writes every queued status once; it reports whether some are
// queued again for a retry.
func (q *StatusQueue) drain(ctx context.Context) bool {
	q.mu.Lock()
	batch := q.pending
	q.pending = map[string]queued{}
	q.mu.Unlock()
	uids := make([]string, 0, len(batch))
	for uid := range batch {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	again := false
	for _, uid := range uids {
		it := batch[uid]
		wctx, cancel := context.WithTimeout(ctx, statusTimeout)
		err := q.w.WriteClaimStatus(wctx, it.st)
		cancel()
		q.m.statusWrite(err)
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		it.attempts++
		if it.attempts >= statusAttempts {
			q.log.Warn("write a claim's status: giving up (it is informational; the claim is prepared)", "claim", it.st.Namespace+"/"+it.st.Name, "attempts", it.attempts, "err", err)
			continue
		}
		q.log.Info("write a claim's status; retrying", "claim", it.st.Namespace+"/"+it.st.Name, "attempt", it.attempts, "err", err)
		q.mu.Lock()
		if _, newer := q.pending[uid]; !newer {
			q.pending[uid] = it
			again = true
		}
		q.mu.Unlock()
	}
	return again
}

// statusOf is rec's status: each device of this driver with the
// services made on it.
func (m *Manager) statusOf(rec Record) ClaimStatus {
	st := ClaimStatus{Namespace: rec.Namespace, Name: rec.Name, UID: rec.UID}
	tcs := m.eng.TCs(rec).Names()
	for _, r := range rec.Results {
		d := DeviceStatus{Pool: r.Pool, Device: r.Device, ShareID: r.ShareID, Data: DeviceData{NIC: r.Device}}
		for _, s := range rec.Services {
			if s.NIC == r.Device {
				d.Data.ServiceIDs = append(d.Data.ServiceIDs, s.ID)
			}
		}
		if rec.VNI != 0 {
			d.Data.VNIs = []uint16{rec.VNI}
			d.Data.TrafficClasses = tcs
		}
		if netdev := m.nics[r.Device].Netdev; netdev != "" {
			for _, l := range rec.HSNLinks() {
				if l.Parent == netdev {
					d.Network = &NetworkData{Interface: l.Name, IPs: []string{l.Address.String()}, HardwareAddress: l.HardwareAddr}
				}
			}
		}
		st.Devices = append(st.Devices, d)
	}
	return st
}
