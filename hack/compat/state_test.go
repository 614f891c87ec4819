package compat

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A checkpoint state travels between the test and the peers as its
// meaning: the "data" of a format 3 file, as JSON. The generator below
// writes the baseline's format (the baseline peer refuses any field its
// types lack), and its states obey the rules the agent's store checks at
// start (agent/checkpoint's Store), so that both trees must open them:
// keys match the records; a CXI service belongs to one record; a service
// carries its holder's VNI and otherwise only VNIs the holder joined by
// name; records of one lease agree on its VNI; a VNI of the node's own
// pool and an hsn address belong to one record; a holder's own VNI is
// nobody's named VNI.

// stateGen makes random states from one source of randomness.
type stateGen struct {
	rng *rand.Rand
}

// holderVNI is a holder's lease: its key, VNI, scope and whether it came
// from the node's own pool.
type holderVNI struct {
	key   string
	vni   int
	scope string
	local bool
}

// nodeState is what the records of one state share, so that they obey
// the rules together.
type nodeState struct {
	nextID   map[string]int // the next service ID on each NIC
	used     map[int]bool   // own VNIs handed out
	leases   []holderVNI    // job and claim leases, shared by records
	named    []namedVNI     // the node's named VNIs (jobOptions)
	nextAddr int
	seen     map[string]bool // record keys
}

type namedVNI struct {
	name string
	vni  int
}

var nics = []string{"cxi0", "cxi1", "cxi2", "cxi3"}

// state returns a random state of node; claims only when withClaims
// (format 1 has none).
func (g *stateGen) state(node string, withClaims bool) map[string]any {
	ns := &nodeState{nextID: map[string]int{}, used: map[int]bool{}, seen: map[string]bool{}}
	for _, nic := range nics {
		ns.nextID[nic] = 1 + g.rng.IntN(2000)
	}
	for i := range g.rng.IntN(4) {
		// Named VNIs lie below the range own VNIs come from, so that no
		// holder's own VNI is a name.
		ns.named = append(ns.named, namedVNI{name: fmt.Sprintf("net%d-%s", i, g.word()), vni: 100 + 200*i + g.rng.IntN(200)})
	}
	st := map[string]any{"node": node}
	if g.rng.IntN(8) == 0 {
		return st // an empty node: no pods key at all, as an old empty file may be
	}
	pods := map[string]any{}
	for range g.rng.IntN(7) {
		p := g.pod(ns)
		pods[p["namespace"].(string)+"/"+p["name"].(string)] = p
	}
	st["pods"] = pods
	if withClaims && g.rng.IntN(4) != 0 {
		claims := map[string]any{}
		for range g.rng.IntN(6) {
			c := g.claim(ns)
			claims[c["uid"].(string)] = c
		}
		st["claims"] = claims
	}
	return st
}

func (g *stateGen) pod(ns *nodeState) map[string]any {
	var namespace, name string
	for {
		namespace, name = g.dnsName(), g.dnsName()
		if !ns.seen[namespace+"/"+name] {
			ns.seen[namespace+"/"+name] = true
			break
		}
	}
	l := g.lease(ns, []string{"job", "pod", "claim", "none"})
	opts := g.options(ns)
	p := map[string]any{
		"uid":       g.maybe(g.uid),
		"namespace": namespace,
		"name":      name,
		"vni":       l.vni,
		"scope":     l.scope,
		"services":  g.podServices(ns, l.vni, opts),
		"deviceIDs": g.deviceIDs(),
		"created":   g.time(),
	}
	g.set(p, "leaseKey", l.key)
	g.set(p, "local", l.local)
	g.set(p, "netns", g.maybeInt(1<<32))
	if g.rng.IntN(3) == 0 {
		p["exited"] = g.time()
	}
	g.set(p, "released", g.rng.IntN(3) == 0)
	g.set(p, "network", g.maybe(func() string { return `{"interfaces":[{"resource":"hpe.com/cxi","address":"` + g.word() + `"}]}` }))
	g.set(p, "collEnv", g.collEnv())
	if g.rng.IntN(3) == 0 {
		ns.nextAddr++
		hsn := map[string]any{
			"name":    "hsn" + strconv.Itoa(g.rng.IntN(4)),
			"parent":  "hsn" + strconv.Itoa(g.rng.IntN(4)),
			"mode":    []string{"macvlan", "ipvlan"}[g.rng.IntN(2)],
			"address": fmt.Sprintf("10.%d.%d.%d/%d", 150+ns.nextAddr/65536, ns.nextAddr/256%256, ns.nextAddr%256, 16+g.rng.IntN(15)),
			"owner":   g.word(),
		}
		g.set(hsn, "mtu", []int{0, 1500, 9000}[g.rng.IntN(3)])
		p["hsn"] = hsn
	}
	if opts != nil {
		p["options"] = opts
	}
	return p
}

func (g *stateGen) claim(ns *nodeState) map[string]any {
	var uid string
	for {
		uid = g.uid()
		if !ns.seen["claim:"+uid] {
			ns.seen["claim:"+uid] = true
			break
		}
	}
	l := g.lease(ns, []string{"job", "pod", "claim", "none", ""})
	var services []any
	for _, nic := range g.nics() {
		s := map[string]any{"nic": nic, "id": g.serviceID(ns, nic)}
		g.set(s, "netns", g.maybeInt(1<<32))
		services = append(services, s)
	}
	var results []any
	for i := range 1 + g.rng.IntN(3) {
		results = append(results, map[string]any{"request": "nic" + strconv.Itoa(i), "pool": g.dnsName(), "device": nics[g.rng.IntN(len(nics))]})
	}
	config := map[string]any{}
	g.set(config, "vni", []string{"", "job", "pod", "none", "claim:" + g.dnsName()}[g.rng.IntN(5)])
	g.set(config, "envSuffix", g.maybe(func() string { return "_" + strings.ToUpper(g.dnsName()) }))
	c := map[string]any{
		"uid":       uid,
		"namespace": g.dnsName(),
		"name":      g.dnsName(),
		"config":    config,
		"results":   results,
		"vni":       l.vni,
		"created":   g.time(),
	}
	var pods []any
	for range g.rng.IntN(3) {
		pods = append(pods, map[string]any{"uid": g.uid(), "namespace": g.dnsName(), "name": g.dnsName()})
	}
	g.set(c, "pods", pods)
	g.set(c, "leaseKey", l.key)
	g.set(c, "scope", l.scope)
	g.set(c, "local", l.local)
	g.set(c, "released", g.rng.IntN(3) == 0)
	g.set(c, "collEnv", g.collEnv())
	g.set(c, "services", services)
	if g.rng.IntN(2) == 0 {
		c["boundPod"] = g.uid()
		c["boundNetns"] = "/var/run/netns/cni-" + g.uid()
	}
	g.set(c, "prepared", g.rng.IntN(2) == 0)
	g.set(c, "unpreparing", g.rng.IntN(4) == 0)
	if o := g.options(ns); o != nil {
		c["options"] = o
	}
	return c
}

// lease returns a holder's VNI: a job's or claim's lease shared with
// other records of the node, a pod's own (from the node's pool or the
// controller), or none.
func (g *stateGen) lease(ns *nodeState, scopes []string) holderVNI {
	scope := scopes[g.rng.IntN(len(scopes))]
	switch scope {
	case "none", "":
		return holderVNI{scope: scope}
	case "job", "claim":
		for _, l := range ns.leases {
			if l.scope == scope && g.rng.IntN(2) == 0 {
				return l // another pod of the same job
			}
		}
		l := holderVNI{key: g.dnsName() + "/" + scope + "-" + g.uid(), vni: g.ownVNI(ns), scope: scope}
		ns.leases = append(ns.leases, l)
		return l
	}
	if g.rng.IntN(2) == 0 {
		return holderVNI{vni: g.ownVNI(ns), scope: scope, local: true}
	}
	return holderVNI{key: g.dnsName() + "/pod-" + g.uid(), vni: g.ownVNI(ns), scope: scope}
}

func (g *stateGen) ownVNI(ns *nodeState) int {
	for {
		v := 1024 + g.rng.IntN(65536-1024)
		if !ns.used[v] {
			ns.used[v] = true
			return v
		}
	}
}

// options are a holder's service options, or nil (the node's defaults).
func (g *stateGen) options(ns *nodeState) map[string]any {
	if g.rng.IntN(3) == 0 {
		return nil
	}
	o := map[string]any{"tcs": g.rng.IntN(256)}
	g.set(o, "depth", g.maybeInt(257))
	if g.rng.IntN(2) == 0 {
		limits := map[string]any{}
		for _, r := range []string{"ptes", "txqs", "tgqs", "eqs", "cts", "acs", "tles", "les"} {
			if g.rng.IntN(2) == 0 {
				limits[r] = map[string]any{"max": g.rng.IntN(65536), "res": g.rng.IntN(65536)}
			}
		}
		o["limits"] = limits
	}
	var extra []any
	for _, n := range ns.named {
		if g.rng.IntN(2) == 0 {
			extra = append(extra, map[string]any{"name": n.name, "vni": n.vni})
		}
	}
	g.set(o, "extraVNIs", extra)
	return o
}

// podServices are a pod's services, one per NIC, carrying its VNI and the
// VNIs it joined by name.
func (g *stateGen) podServices(ns *nodeState, vni int, opts map[string]any) []any {
	vnis := []any{vni}
	if opts != nil {
		extra, _ := opts["extraVNIs"].([]any)
		for _, e := range extra {
			vnis = append(vnis, e.(map[string]any)["vni"])
		}
	}
	var out []any
	for _, nic := range g.nics() {
		out = append(out, map[string]any{"nic": nic, "id": g.serviceID(ns, nic), "vnis": vnis})
	}
	return out
}

func (g *stateGen) serviceID(ns *nodeState, nic string) int {
	id := ns.nextID[nic]
	ns.nextID[nic] += 1 + g.rng.IntN(3)
	return id
}

// nics is a random subset of the node's NICs, in order.
func (g *stateGen) nics() []string {
	var out []string
	for _, nic := range nics {
		if g.rng.IntN(2) == 0 {
			out = append(out, nic)
		}
	}
	return out
}

func (g *stateGen) deviceIDs() map[string]any {
	out := map[string]any{}
	for range g.rng.IntN(3) {
		var ids []any
		for range g.rng.IntN(3) { // a container may hold none
			ids = append(ids, fmt.Sprintf("%s-%d", nics[g.rng.IntN(len(nics))], g.rng.IntN(8)))
		}
		if ids == nil {
			ids = []any{}
		}
		out[g.dnsName()] = ids
	}
	return out
}

func (g *stateGen) collEnv() []any {
	if g.rng.IntN(3) != 0 {
		return nil
	}
	return []any{"FI_CXI_COLL_JOB_ID=" + g.word(), "FI_CXI_COLL_MCAST_TOKEN=" + g.word(), "FI_CXI_HWCOLL_MIN_NODES=" + strconv.Itoa(g.rng.IntN(64))}
}

// time is a random instant with nanoseconds, in UTC or at an offset (the
// agent writes its local time).
func (g *stateGen) time() string {
	t := time.Unix(1_600_000_000+g.rng.Int64N(400_000_000), g.rng.Int64N(1e9))
	zone := time.UTC
	if g.rng.IntN(3) == 0 {
		zone = time.FixedZone("", (g.rng.IntN(27)-12)*3600)
	}
	return t.In(zone).Format(time.RFC3339Nano)
}

// wordRunes are what names and strings are made of: what Kubernetes
// allows, and what JSON must carry unharmed.
var wordRunes = []rune("abcdefghijklmnopqrstuvwxyz0123456789-.\"\\<>&/ \u00e9\u4e16\u2028\U0001F680")

func (g *stateGen) word() string {
	r := make([]rune, 1+g.rng.IntN(12))
	for i := range r {
		r[i] = wordRunes[g.rng.IntN(len(wordRunes))]
	}
	return string(r)
}

func (g *stateGen) dnsName() string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 1+g.rng.IntN(20))
	for i := range b {
		b[i] = letters[g.rng.IntN(len(letters))]
	}
	return string(b)
}

func (g *stateGen) uid() string {
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", g.rng.Uint32(), g.rng.IntN(1<<16), g.rng.IntN(1<<16), g.rng.IntN(1<<16), g.rng.Uint64()&(1<<48-1))
}

// maybe returns f() or, one time in three, "" (unknown, or none).
func (g *stateGen) maybe(f func() string) string {
	if g.rng.IntN(3) == 0 {
		return ""
	}
	return f()
}

func (g *stateGen) maybeInt(n int) int {
	if g.rng.IntN(3) == 0 {
		return 0
	}
	return g.rng.IntN(n)
}

// set puts v in m unless it is a zero value, as the format's omitempty
// fields are written, but not always: a reader must take a zero written
// out as the same.
func (g *stateGen) set(m map[string]any, key string, v any) {
	zero := false
	switch v := v.(type) {
	case string:
		zero = v == ""
	case int:
		zero = v == 0
	case bool:
		zero = !v
	case []any:
		zero = len(v) == 0
	}
	if !zero || g.rng.IntN(4) == 0 {
		m[key] = v
	}
}

// schema is a tree's state (or lease) schema by path.
type schema map[string]schemaPath

// schemaPath is peer.SchemaPath.
type schemaPath struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	Ptr  bool   `json:"ptr"`
}

func newSchema(paths []schemaPath) schema {
	s := schema{}
	for _, p := range paths {
		s[p.Path] = p
	}
	return s
}

// norm returns v's meaning under the schema at path, as encoding/json
// would decode it into the schema's Go types: zero fields and absent ones
// alike (nil), an empty array or map like none, instants in UTC, keys the
// schema lacks dropped (a newer writer's fields, which an older reader
// ignores). A map's entries and an array's elements keep their places,
// and a pointer to a zero struct is not nil.
func (s schema) norm(v any, path string) any {
	p := s[path]
	switch v := v.(type) {
	case nil:
		return nil
	case map[string]any:
		out := map[string]any{}
		if p.Kind == "map" {
			for k, e := range v {
				out[k] = s.norm(e, join(path, "*"))
			}
			if len(out) == 0 {
				return nil
			}
			return out
		}
		for k, e := range v {
			kp := join(path, k)
			if _, known := s[kp]; !known {
				continue
			}
			if n := s.norm(e, kp); n != nil {
				out[k] = n
			}
		}
		if len(out) == 0 && !p.Ptr && path != "" {
			return nil
		}
		return out
	case []any:
		if len(v) == 0 {
			return nil
		}
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = s.norm(e, path+"[]")
		}
		return out
	case string:
		if p.Kind == "time" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return "unparsable time " + strconv.Quote(v)
			}
			if t.IsZero() && !p.Ptr {
				return nil
			}
			return t.UTC().Format(time.RFC3339Nano)
		}
		if v == "" {
			return nil
		}
		return v
	case json.Number:
		if f, err := v.Float64(); err == nil && f == 0 {
			return nil
		}
		return v.String()
	case float64:
		if v == 0 {
			return nil
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	case int:
		if v == 0 {
			return nil
		}
		return strconv.Itoa(v)
	case bool:
		if !v {
			return nil
		}
		return true
	}
	return fmt.Sprintf("unexpected %T %v", v, v)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// setPaths adds to seen every path of the schema below path where v has a
// value that is not zero: what the generator covered.
func (s schema) setPaths(v any, path string, seen map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		if s[path].Kind == "map" {
			for _, e := range v {
				s.setPaths(e, join(path, "*"), seen)
			}
		} else {
			for k, e := range v {
				s.setPaths(e, join(path, k), seen)
			}
		}
	case []any:
		for _, e := range v {
			s.setPaths(e, path+"[]", seen)
		}
	}
	if s.norm(v, path) != nil {
		seen[path] = true
	}
}

// leaves are the schema's paths that hold values.
func (s schema) leaves() []string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(s)) {
		if k := s[p].Kind; k == "scalar" || k == "time" {
			out = append(out, p)
		}
	}
	return out
}
