# syntax=docker/dockerfile:1
#
# Images of the two programs, built from one source tree:
#
#   docker build --target agent      -t REGISTRY/slingshot-agent:TAG .
#   docker build --target controller -t REGISTRY/slingshot-controller:TAG .
#
# TAG is the release (the chart's appVersion, which the chart's image tag
# defaults to); `make release` builds both for linux/amd64 and arm64.
#
# The kubectl plugin (`kubectl slingshot`, a static linux binary for the
# user's machine) ships in the controller image, to copy onto PATH:
#
#   id=$(docker create REGISTRY/slingshot-controller:TAG)
#   docker cp $id:/usr/local/bin/kubectl-slingshot . && docker rm $id
#
# The agent image also carries the slingshot-ipam CNI plugin, which the
# DaemonSet's init container copies into the node's CNI bin dir
# (`slingshot-ipam install DIR`: the base has no cp). All binaries are
# static (CGO_ENABLED=0, -trimpath): `make build` builds the same ones
# into bin/. The agent talks to the cluster controller and
# links no database; for an agent that runs the controller in-process
# (--controller=embedded, the chart's controller.enabled=false), build its
# image with --build-arg TAGS=embedded_controller. The base is distroless static (CA certificates,
# tzdata, /etc/passwd with the nonroot user, no shell, no package manager).
# The Helm chart (deploy/helm/slingshot) sets the rest of each program's
# privileges; the agent's are listed and explained there and below.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
# Go build tags: embedded_controller for an agent with the embedded controller.
ARG TAGS=""
# What --version and slingshot_build_info say (`make release` passes
# them): the release, the git commit and the build date. The context has
# no .git, so the commit is unknown unless given; an empty VERSION keeps
# the binaries' default, which equals the chart's appVersion.
ARG VERSION=""
ARG COMMIT=""
ARG BUILD_DATE=""
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    pkg=github.com/slingshot-k8s/slingshot/internal/version; \
    ldflags="-s -w -X $pkg.Commit=${COMMIT} -X $pkg.BuildDate=${BUILD_DATE}"; \
    if [ -n "${VERSION}" ]; then ldflags="$ldflags -X $pkg.Version=${VERSION}"; fi; \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -tags "${TAGS}" -ldflags="$ldflags" -o /out/ ./cmd/...

# The cluster controller: talks to the API server and serves its ports, so it
# runs as the unprivileged nonroot user (65532) with nothing added.
FROM gcr.io/distroless/static-debian12:nonroot AS controller
COPY --from=build /out/slingshot-controller /usr/local/bin/slingshot-controller
COPY --from=build /out/kubectl-slingshot /usr/local/bin/kubectl-slingshot
USER 65532:65532
# gRPC for the agents, Metacontroller hooks, metrics and health.
EXPOSE 9440 9441 9442
ENTRYPOINT ["/usr/local/bin/slingshot-controller"]

# The node agent runs as root: the kubelet's device-plugin and pod-resources
# sockets, /var/run/cdi and its state directory belong to root. Its other
# privileges come from the DaemonSet, each for one reason:
#   - privileged (or, with the simulated driver, CAP_SYS_ADMIN): the CXI
#     driver's service commands are admin-only, and the device cgroup of an
#     unprivileged container admits no host device such as /dev/cxiN;
#   - CAP_NET_ADMIN, with the hsn interface on: the pods' macvlan or ipvlan
#     links, made over rtnetlink inside their network namespaces;
#   - CAP_SYS_PTRACE: reading /proc/<pid>/ns/net of pod processes of other
#     users (hostPID), to make the pod's network namespace its service member;
#   - host network: NIC link events, the "cxierr" netlink family and ethtool;
#   - host paths: /dev (the /dev/cxiN nodes), /sys read-only (discovery),
#     /var/lib/kubelet/device-plugins and .../pod-resources (the kubelet's
#     sockets), /var/run/cdi (CDI specs) and /var/lib/slingshot-agent (its
#     state, at the same path, because the kubelet mounts files from it),
#     /run/slingshot-agent (the IPAM socket the CNI plugin dials on the
#     host) and, for the init container alone, the CNI bin dir.
# Same base as the controller; only the user differs.
FROM gcr.io/distroless/static-debian12:nonroot AS agent
COPY --from=build /out/slingshot-agent /usr/local/bin/slingshot-agent
COPY --from=build /out/slingshot-ipam /usr/local/bin/slingshot-ipam
USER 0:0
# /metrics, /healthz, /readyz and /inspect (bound to the node's IP).
EXPOSE 9479
ENTRYPOINT ["/usr/local/bin/slingshot-agent"]
