# Slingshot fabric agent and controller.
# `make check` is the one test command: CI (.ci/run) runs exactly it.

GO        ?= go
BIN       ?= bin
PKGS      ?= ./...
FUZZTIME  ?= 30s
BENCHTIME ?= 1s
STATICCHECK_VERSION ?= v0.8.2
LDFLAGS   ?= -s -w

.PHONY: all build test e2e demo check lint bench fuzz generate clean

all: build

## build: static binaries of both programs into ./bin
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

## test: go vet and the race-enabled unit tests of the whole module
test:
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 $(PKGS)

## e2e: the end-to-end tests against the kubelet's own device manager
## (their own Go module, so the project's go.mod stays lean)
e2e:
	cd hack/kubelet-e2e && $(GO) vet ./... && $(GO) test -count=1 -timeout 20m ./...

## demo: the agent on a simulated node, driven by the kubelet's own device
## manager: registration, pods of two jobs, services, metrics, cleanup
demo:
	cd hack/kubelet-e2e && $(GO) run ./demo

## check: everything CI runs (the README's test command)
check: test e2e validate-manifests e2e-k8s

## lint: formatting, vet and staticcheck
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

## bench: the benchmarks, with memory figures
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
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
	rm -rf $(BIN)

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

## manifests: re-render deploy/manifests, the chart's crds/ and its README values table
manifests:
	cd $(VALIDATE_DIR) && $(GO) run . -root ../.. -write

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

## kube-apiserver: etcd (installed when missing) and hack/kube-apiserver/bin/kube-apiserver
kube-apiserver:
	@command -v etcd >/dev/null 2>&1 || { $(SUDO) apt-get update && $(SUDO) apt-get install -y etcd-server; }
	cd hack/kube-apiserver && $(GO) build -o bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
