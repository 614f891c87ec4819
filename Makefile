# Slingshot fabric agent and controller.
# `make check` is the one test command: CI (.ci/run) runs exactly it.

GO        ?= go
BIN       ?= bin
PKGS      ?= ./...
FUZZTIME  ?= 30s
BENCHTIME ?= 1s
STATICCHECK_VERSION ?= v0.8.2
LDFLAGS   ?= -s -w
# TAGS: Go build tags of `make build`; TAGS=embedded_controller gives the
# agent the in-process controller (--controller=embedded) and sqlite.
TAGS      ?=

.PHONY: all build test e2e demo check lint bench fuzz generate clean release

# The release, from its one source: the chart's appVersion. Every binary
# says it (--version, slingshot_build_info), the images are tagged with it
# and the chart's image tag defaults to it; internal/version's test checks
# that the default of a plain `go build` agrees.
CHART       := deploy/helm/slingshot
VERSION     := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' $(CHART)/Chart.yaml)
COMMIT      ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
# The build date; SOURCE_DATE_EPOCH (reproducible builds) fixes it.
BUILD_DATE  ?= $(shell date -u $${SOURCE_DATE_EPOCH:+-d @$$SOURCE_DATE_EPOCH} +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := github.com/slingshot-k8s/slingshot/internal/version
VERSION_LDFLAGS = -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(COMMIT) -X $(VERSION_PKG).BuildDate=$(BUILD_DATE)

all: build

## build: static binaries of the programs (agent, controller, slingshot-ipam,
## kubectl-slingshot) into ./bin, stamped with the release, commit and date
build:
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS) $(VERSION_LDFLAGS)' -o $(BIN)/ ./cmd/...

## release: everything a release publishes, into $(DIST) (dist/): the four
## binaries for linux amd64 and arm64 (static), the agent and controller
## images for both (OCI archives, by Docker's BuildKit; skipped, and said
## so, where docker buildx is not usable; RELEASE_PUSH=1 pushes them to
## IMAGE_REGISTRY instead), the packaged chart (Helm's Go library, in
## hack/validate-manifests), the CRDs in one file, and SHA256SUMS of them
## all. docs/upgrade.md says how a release is cut.
DIST           ?= dist
RELEASE_ARCHES ?= amd64 arm64
IMAGE_REGISTRY ?= ghcr.io/slingshot-k8s
RELEASE_PUSH   ?=
release:
	@[ -n "$(VERSION)" ] || { echo "release: no appVersion in $(CHART)/Chart.yaml"; exit 1; }
	rm -rf $(DIST) && mkdir -p $(DIST)
	@set -e; for arch in $(RELEASE_ARCHES); do \
	  out=$(DIST)/.bin-$$arch; \
	  echo "binaries linux/$$arch"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS) $(VERSION_LDFLAGS)' -o $$out/ ./cmd/...; \
	  for b in $$out/*; do mv $$b $(DIST)/$$(basename $$b)-$(VERSION)-linux-$$arch; done; \
	  rmdir $$out; \
	done
	@set -e; \
	if ! command -v docker >/dev/null 2>&1; then \
	  echo "skipped: images (no docker here); build them where Docker with BuildKit (buildx) runs: make release"; \
	elif ! docker buildx version >/dev/null 2>&1; then \
	  echo "skipped: images (docker here has no buildx, Docker's BuildKit front end)"; \
	elif ! docker info >/dev/null 2>&1; then \
	  echo "skipped: images (the docker daemon is not reachable)"; \
	else \
	  platforms=$$(for a in $(RELEASE_ARCHES); do printf 'linux/%s,' $$a; done); platforms=$${platforms%,}; \
	  for t in agent controller; do \
	    image=$(IMAGE_REGISTRY)/slingshot-$$t:$(VERSION); \
	    if [ -n "$(RELEASE_PUSH)" ]; then output=--push; else output="--output type=oci,dest=$(DIST)/slingshot-$$t-$(VERSION).oci.tar"; fi; \
	    echo "image $$image ($$platforms)"; \
	    DOCKER_BUILDKIT=1 docker buildx build --platform $$platforms --target $$t -t $$image \
	      --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg BUILD_DATE=$(BUILD_DATE) $$output .; \
	  done; \
	fi
	cd $(VALIDATE_DIR) && $(GO) run ./cmd/package-chart -chart ../../$(CHART) -version $(VERSION) -out ../../$(DIST)
	@set -e; crds=$(DIST)/slingshot-crds-$(VERSION).yaml; : > $$crds; \
	for f in deploy/crds/*.yaml; do echo "---" >> $$crds; cat $$f >> $$crds; done
	cd $(DIST) && sha256sum $$(ls | grep -v '^SHA256SUMS$$') > SHA256SUMS
	@echo "release $(VERSION) in $(DIST)/:"; ls -l $(DIST)

## test: go vet and the race-enabled unit tests of the whole module
test:
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 $(PKGS)
	$(GO) vet -tags embedded_controller ./cmd/slingshot-agent
	$(GO) test -race -count=1 -tags embedded_controller ./cmd/slingshot-agent

## e2e: the end-to-end tests against the kubelet's own device manager
## (their own Go module, so the project's go.mod stays lean)
e2e:
	cd hack/kubelet-e2e && $(GO) vet ./... && $(GO) test -count=1 -timeout 20m ./...

## demo: the agent on a simulated node, driven by the kubelet's own device
## manager: registration, pods of two jobs, services, metrics, cleanup
demo:
	cd hack/kubelet-e2e && $(GO) run ./demo

## check: everything CI runs (the README's test command, exactly what .ci/run runs)
check: test structure e2e validate-manifests compat monitoring e2e-k8s e2e-node e2e-node-nri e2e-node-dra e2e-node-kubectl e2e-node-multi e2e-node-upgrade

## lint: formatting, vet and staticcheck
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

## bench: the benchmarks, with memory figures
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## bench-memory: the agent's resident memory (RssAnon, RssFile, RssShmem from
## /proc, its Go heap, goroutines and open files) idle and over BENCH_MEMORY_PODS
## pod starts and exits (10,000, the figure to quote), the agent built as it
## ships, the simulated driver and 4 NICs under the kubelet's own device manager
## (hack/kubelet-e2e BenchmarkAgentMemory): once beside a cluster controller
## (remote) and once with the embedded one. It fails over 16 MiB anonymous idle,
## or when memory, goroutines or open files grow after the first fifth of the
## pods. 8-13 min each on 2 busy cores; needs root and util-linux's unshare.
## BENCH_MEMORY_FLAGS passes more, e.g. '-bench BenchmarkAgentMemory/remote'.
BENCH_MEMORY_PODS  ?= 10000
BENCH_MEMORY_FLAGS ?=
.PHONY: bench-memory
bench-memory:
	cd hack/kubelet-e2e && $(GO) test -count=1 -v -timeout 90m -run '^$$' -bench BenchmarkAgentMemory -benchtime 1x \
	  $(BENCH_MEMORY_FLAGS) . -memory.pods $(BENCH_MEMORY_PODS)

## fuzz: the DRA path's randomized interleavings over INTERLEAVE_SEEDS seeds
## (make test runs 30), then every fuzz target for FUZZTIME each
INTERLEAVE_SEEDS ?= 400
fuzz:
	$(GO) test -count=1 -run '^TestDRAInvariantsUnderInterleavings$$' ./agent/dra -interleave.seeds=$(INTERLEAVE_SEEDS)
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## generate: regenerate the controller's gRPC code. Needs protoc (Debian
## protobuf-compiler 3.21.12) and the plugins at the versions noted in
## controller/api/v1/generate.go:
##   apt-get install protobuf-compiler
##   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
##   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
generate:
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" $(GO) generate ./controller/api/...

clean:
	rm -rf $(BIN) $(DIST)

## validate-manifests: render the Helm chart (Helm's Go library) and validate every object,
## deploy/manifests, deploy/crds and deploy/examples against the Kubernetes 1.37 OpenAPI schemas
## and the CRDs; fail on stale generated files; lint the Dockerfile (BuildKit's checks); check
## that the binaries `make build` makes are static. One `go test` runs it all (TestRun is the
## validation itself; `go run .` in that directory prints its report).
VALIDATE_DIR ?= hack/validate-manifests
.PHONY: validate-manifests manifests
validate-manifests: build
	cd $(VALIDATE_DIR) && $(GO) test -count=1 ./...
	@for b in $(BIN)/*; do \
	  if ldd $$b >/dev/null 2>&1; then echo "$$b is dynamically linked:"; ldd $$b; exit 1; fi; \
	  if command -v file >/dev/null; then file $$b | grep -q 'statically linked' || { file $$b; echo "$$b: not static"; exit 1; }; fi; \
	  echo "$$b: static"; \
	done

## structure: the agent's shape, checked from the type-checked code in its own
## Go module (hack/structure, golang.org/x/tools/go/packages): only agent/engine
## creates, binds or destroys a CXI service; the root, agent/devplugin,
## agent/dra and agent/nri import only what ARCHITECTURE.md says. About 20 s.
.PHONY: structure
structure:
	cd hack/structure && $(GO) vet ./... && $(GO) test -count=1 ./...

## compat: HEAD against the baseline release (docs/upgrade.md names it), in its
## own Go module (hack/compat): a git worktree of the baseline commit from this
## repository's history, one peer program built there and here, and random
## checkpoint states (formats 1 to 3, snapshot and journal), controller API
## messages, the agent's reading of the controller's answers and errors, the
## controller's sqlite databases (store states, and each release's controller
## run over the other's), and user agents handed both ways; the CRDs
## compared. About a minute after
## `make build` (whose build cache it shares). Needs git and the full history:
## it fails, never skips, without them. COMPAT_FLAGS passes test flags, e.g.
## COMPAT_FLAGS='-compat.seed=N' to repeat a failed run.
COMPAT_FLAGS ?=
.PHONY: compat
compat:
	cd hack/compat && $(GO) vet ./... && $(GO) test -count=1 -timeout 15m ./... $(COMPAT_FLAGS)

## manifests: re-render deploy/manifests, the chart's crds/ and its README values table,
## and regenerate the chart's Grafana dashboard (hack/monitoring/dashboard)
manifests:
	cd $(MONITORING_DIR) && $(GO) run . -root ../..
	cd $(VALIDATE_DIR) && $(GO) run . -root ../.. -write

## monitoring: the chart's alerts and Grafana dashboard (deploy/helm/slingshot/monitoring),
## checked in their own Go module (hack/monitoring: Prometheus's PromQL parser and rule
## engine, Grafana's foundation SDK): every rule expression and panel query parsed, every
## alert unit-tested on series that must fire it and series that must not, the dashboard
## equal to a fresh build, and every metric and label they name exported by a live
## controller and a live agent in each mode, device plugin and DRA (the binaries built
## from this tree, started and scraped; the DRA agent with stand-ins for the API server,
## the kubelet and the runtime's NRI). A DRA-mode agent driven into a failed checkpoint
## write and into services stuck busy fires those alerts from the series it exports.
MONITORING_DIR ?= hack/monitoring
.PHONY: monitoring
monitoring:
	cd $(MONITORING_DIR) && $(GO) vet ./... && $(GO) test -count=1 ./...

## e2e-k8s: the controller's Kubernetes store and leader election against a
## real kube-apiserver (built by hack/kube-apiserver from k8s.io/kubernetes
## v1.37.1; ~4-11 min the first time on 2 cores, cached after) on a real etcd
## (Debian's etcd-server, installed here when missing). Its own Go module, so
## the project's go.mod stays lean. E2E_K8S_FLAGS passes test flags, e.g.
## E2E_K8S_FLAGS='-run TestHeartbeats -heartbeat.nodes=1000'.
E2E_K8S_FLAGS ?=
E2E_K8S_TIMEOUT ?= 60m
SUDO ?= $(shell [ "$$(id -u)" = 0 ] || echo sudo)
.PHONY: e2e-k8s e2e-k8s-bench kube-apiserver
e2e-k8s: kube-apiserver
	cd hack/kube-apiserver && $(GO) vet ./... && E2E_K8S_REQUIRED=1 ETCD="$$(command -v etcd)" \
	  $(GO) test -count=1 -timeout $(E2E_K8S_TIMEOUT) -v ./... $(E2E_K8S_FLAGS)

## e2e-k8s-bench: acquires per second, p50 and p99 from 64 clients on the
## Kubernetes store beside the sqlite store, in one benchmark run
## (E2E_K8S_BENCHTIME acquires per store; the range holds 64,512).
E2E_K8S_BENCHTIME ?= 10000x
e2e-k8s-bench: kube-apiserver
	cd hack/kube-apiserver && E2E_K8S_REQUIRED=1 ETCD="$$(command -v etcd)" \
	  $(GO) test -count=1 -run '^$$' -bench BenchmarkAcquire -benchtime $(E2E_K8S_BENCHTIME) ./e2e

## gang-bench: a gang start on a real kube-apiserver: the controller binary
## (kube store) and 512 simulated nodes on the agent's lease path
## (controllerclient, engine.Leases, cxi/sim), one job of 4,096 pods, then
## 64 jobs of 64, all admitted at once: admission-to-leased and -bound
## p50/p99/max, controller calls and API writes per node per job, CPU.
## It fails when a node calls the controller more than once for one job
## (GANG_BENCH_FLAGS=-gang.loose-calls only logs it).
GANG_BENCH_FLAGS ?=
.PHONY: gang-bench
gang-bench: kube-apiserver
	cd hack/kube-apiserver && E2E_K8S_REQUIRED=1 ETCD="$$(command -v etcd)" \
	  $(GO) test -count=1 -timeout 30m -run '^$$' -bench BenchmarkGang -benchtime 1x -v ./gang $(GANG_BENCH_FLAGS)

## ipam-bench: ADD/DEL p50 and p99 of slingshot-ipam, whereabouts in
## node-slice mode (built from the module proxy, on a real kube-apiserver)
## and Debian's host-local, in one run. IPAM_BENCH_FLAGS, e.g. -n 200.
IPAM_BENCH_FLAGS ?=
.PHONY: ipam-bench
ipam-bench: kube-apiserver
	@[ -x /usr/lib/cni/host-local ] || { $(SUDO) apt-get update && $(SUDO) apt-get install -y containernetworking-plugins; }
	cd hack/ipam-bench && $(GO) run . $(IPAM_BENCH_FLAGS)

## kube-apiserver: etcd (installed when missing) and hack/kube-apiserver/bin/kube-apiserver
kube-apiserver:
	@command -v etcd >/dev/null 2>&1 || { $(SUDO) apt-get update && $(SUDO) apt-get install -y etcd-server; }
	cd hack/kube-apiserver && $(GO) build -o bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver

## e2e-node: the pod path on a whole real node: etcd, kube-apiserver,
## kube-controller-manager, kube-scheduler and kubelet v1.37.1 (built from
## k8s.io/kubernetes by hack/real-node), containerd v2.4.2 (from the module
## proxy) with Debian's runc and CNI plugins, the project installed with its
## own Helm chart, pods made by real Jobs. Everything lives under one
## temporary root the test removes (its logs are kept when it fails, and
## their path printed). Needs root and util-linux's unshare; installs
## etcd-server, runc, containernetworking-plugins, iproute2 and iptables
## when missing.
## E2E_NODE_FLAGS passes test flags, e.g. E2E_NODE_FLAGS='-run TestBurst'.
E2E_NODE_FLAGS ?=
E2E_NODE_TIMEOUT ?= 45m
REAL_NODE_DIR := hack/real-node
# The version the components report (Helm checks the chart's kubeVersion).
K8S_VERSION_LDFLAGS := -X k8s.io/component-base/version.gitVersion=v1.37.1 \
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
  -X k8s.io/component-base/version.gitTreeState=clean
.PHONY: e2e-node e2e-node-dra e2e-node-multi bench-node-dra bench-node-shared demo-node real-node-bin real-node-deps
e2e-node: real-node-bin
	cd $(REAL_NODE_DIR) && $(GO) vet ./... && \
	  $(GO) test -count=1 -timeout $(E2E_NODE_TIMEOUT) -v ./e2e $(E2E_NODE_FLAGS)

## e2e-node-nri: the device plugin with --deviceplugin-nri on the same kind
## of node (hack/real-node/e2enri, chart value agent.devicePluginNRI): a
## Job's pods with their SLINGSHOT_* set by the agent at containerd's
## CreateContainer and no CDI device; a container whose service went away
## between PreStartContainer and CreateContainer refused there (an NRI hook
## of the test's, called first, destroys it) until the kubelet's retry binds
## it again; a killed container bound again at its restart's
## PreStartContainer; containerd restarted without NRI: the agent not
## ready, pods refused at PreStartContainer, until NRI is back. About 4
## minutes on 2 busy cores. E2E_NODE_FLAGS as for e2e-node.
.PHONY: e2e-node-nri
e2e-node-nri: real-node-bin
	cd $(REAL_NODE_DIR) && $(GO) vet ./... && \
	  $(GO) test -count=1 -timeout $(E2E_NODE_TIMEOUT) -v ./e2enri $(E2E_NODE_FLAGS)

## e2e-node-kubectl: kubectl slingshot (vnis, pod, nodes) on the same kind
## of node, its controller on the Kubernetes store (hack/real-node/e2ekubectl):
## a running Job's VNI and services, the agent asked through pods/exec.
## E2E_NODE_FLAGS as for e2e-node.
.PHONY: e2e-node-kubectl
e2e-node-kubectl: real-node-bin
	cd $(REAL_NODE_DIR) && $(GO) vet ./... && \
	  $(GO) test -count=1 -timeout $(E2E_NODE_TIMEOUT) -v ./e2ekubectl $(E2E_NODE_FLAGS)

## e2e-node-upgrade: upgrades, rollbacks and version skew on the same kind
## of node (hack/real-node/e2eupgrade): the baseline release, built by the
## test from its commit in the repository's history (a git worktree; the
## test fails without git or that commit, e.g. in a shallow clone),
## upgraded to HEAD and rolled back with its own chart as docs/upgrade.md
## says, pods of two Jobs keeping their services, environment and VNI
## throughout; HEAD's controller with the baseline's agent and the
## reverse, on the sqlite and the Kubernetes store. About 5 to 7 minutes
## on 2 cores (a minute of it building both releases).
## E2E_NODE_FLAGS as for e2e-node.
.PHONY: e2e-node-upgrade
e2e-node-upgrade: real-node-bin
	cd $(REAL_NODE_DIR) && $(GO) vet ./... && \
	  $(GO) test -count=1 -timeout $(E2E_NODE_TIMEOUT) -v ./e2eupgrade $(E2E_NODE_FLAGS)

## e2e-node-dra: the agent's DRA front end on the same kind of node
## (hack/real-node/e2edra, chart value api=dra): the node's ResourceSlice,
## a Job's pods on claims with their services bound by the agent's NRI
## plugin before the containers start, restarts of the kubelet and the
## agent, a refused hostNetwork pod. E2E_NODE_FLAGS as for e2e-node.
e2e-node-dra: real-node-bin
	cd $(REAL_NODE_DIR) && $(GO) vet ./... && \
	  $(GO) test -count=1 -timeout $(E2E_NODE_TIMEOUT) -v ./e2edra $(E2E_NODE_FLAGS)

## e2e-node-multi: jobs across two real nodes (hack/real-node/e2emulti): one
## control plane and two nodes, each its own kubelet, containerd, mock
## machine and agent in namespaces of its own, one controller. A Job's pods
## on both nodes share one VNI; pod-scoped VNIs come from the nodes'
## disjoint slices; one node's agent killed changes nothing on the other; a
## deleted Job's VNI is freed once both nodes released it; a deleted node
## keeps its holds through --slice-grace and loses them then. A second run,
## the agents in DRA mode with the PodGroup claims gates on, puts a claim
## template's claims on both nodes, and gives a PodGroup's pods on both
## nodes one VNI through one claim (also with binding conditions).
## About 4 minutes. E2E_NODE_FLAGS as for e2e-node (first run only).
e2e-node-multi: real-node-bin
	cd $(REAL_NODE_DIR) && $(GO) vet ./... && \
	  $(GO) test -count=1 -timeout $(E2E_NODE_TIMEOUT) -v ./e2emulti $(E2E_NODE_FLAGS) && \
	  $(GO) test -count=1 -timeout $(E2E_NODE_TIMEOUT) -v ./e2emulti -run TestMultiDRA -args -node-api=dra

## bench-node-dra: the time from a pod's NIC allocation to its container
## running, seen by watches, for BENCH_NODE_PODS pods one after another:
## on a node whose agent serves the device plugin, then on one serving DRA
## (p50, p95, max).
BENCH_NODE_PODS ?= 50
bench-node-dra: real-node-bin
	cd $(REAL_NODE_DIR) && for api in deviceplugin dra; do \
	  $(GO) test -count=1 -timeout $(E2E_NODE_TIMEOUT) ./e2edra -run '^$$' -bench AllocatedToStarted \
	    -benchtime $(BENCH_NODE_PODS)x -args -node-api=$$api || exit 1; done

## bench-node-shared: 32 pods made at once on the real node's 4 NICs, each with
## a NIC: claims sharing the NICs (DRA) beside hpe.com/cxi: 1 on the device
## plugin's shares; creation to running p50/p95/max per pod, and until all
## run (hack/real-node/e2edra, BenchmarkSharedNICsStart).
bench-node-shared: real-node-bin
	cd $(REAL_NODE_DIR) && for api in deviceplugin dra; do \
	  $(GO) test -count=1 -timeout $(E2E_NODE_TIMEOUT) ./e2edra -run '^$$' -bench SharedNICsStart \
	    -benchtime 1x -args -node-api=$$api || exit 1; done

## demo-node: the same node, left running with the project installed, for a
## person to explore with kubectl; Ctrl-C tears it down and removes its root.
demo-node: real-node-bin
	cd $(REAL_NODE_DIR) && $(GO) run ./cmd/demo-node

## real-node-deps: the node's Debian packages, installed when missing
real-node-deps:
	@pkgs=""; \
	command -v etcd >/dev/null 2>&1 || pkgs="$$pkgs etcd-server"; \
	command -v runc >/dev/null 2>&1 || pkgs="$$pkgs runc"; \
	[ -x /usr/lib/cni/bridge ] || pkgs="$$pkgs containernetworking-plugins"; \
	command -v ip >/dev/null 2>&1 || pkgs="$$pkgs iproute2"; \
	command -v iptables >/dev/null 2>&1 || pkgs="$$pkgs iptables"; \
	if [ -n "$$pkgs" ]; then $(SUDO) apt-get update && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y $$pkgs; fi

## real-node-bin: the node's programs into hack/real-node/bin (cached by Go's
## build cache: about 15 min from empty caches on 2 cores, a minute or two
## of linking after)
real-node-bin: real-node-deps
	cd $(REAL_NODE_DIR)/containerd && CGO_ENABLED=0 $(GO) build -trimpath -tags 'no_btrfs no_devmapper no_zfs' -o ../bin/ \
	  github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
	  github.com/containerd/containerd/v2/cmd/ctr
	cd $(REAL_NODE_DIR) && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(K8S_VERSION_LDFLAGS)' -o bin/ \
	  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
