# faultline: distributed training on Kubernetes that restarts on infrastructure faults and
# fails fast on application bugs. `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

GO       ?= go
BIN      := bin
TOOLS    := hack/build-tools.sh
# Paths of the pinned tools (ETCD_BIN, KUBE_BIN_DIR, KWOK_BIN_DIR, CONTROLLER_GEN, STATICCHECK,
# PROTOC_GEN_GO, PROTOC_GEN_GO_GRPC).
$(foreach line,$(shell $(TOOLS) paths),$(eval $(line)))

# The tree's version, as every binary built from it says it (pkg/version: the tag at HEAD, a
# pseudo-version after one, dev before any): the images' tags and the release's manifests.
# VERSION=vX.Y.Z sets it instead.
VERSION  ?= $(shell $(GO) build -buildvcs=auto -o _output/tree-version ./hack/version 2>/dev/null && _output/tree-version || echo dev)
LDFLAGS  := -s -w -X github.com/faultline-dev/faultline/pkg/version.Version=$(VERSION)
# grpcnotrace: gRPC's request tracing (x/net/trace) links html/template, whose reflection
# keeps methods the linker would drop: without it the node agent's executable, most of its
# resident memory, is 6 MB smaller. Nothing here uses grpc.EnableTracing. test/cluster
# builds the binaries it runs with the same tags.
BUILD_TAGS := grpcnotrace
# Every binary the product ships: cmd/* and plugins/* (faultline-plugin-<name>).
CMDS     := $(notdir $(wildcard cmd/*))
PLUGINS  := $(notdir $(wildcard plugins/*))
# A whole `make test` (unit, integration, e2e) on a 2-core machine.
TEST_TIMEOUT ?= 40m
comma := ,
empty :=
space := $(empty) $(empty)

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build every binary into bin/.
	@mkdir -p $(BIN)
	@for c in $(CMDS); do [ -f cmd/$$c/main.go ] && $(GO) build -trimpath -tags '$(BUILD_TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN)/$$c ./cmd/$$c; done; true
	@for p in $(PLUGINS); do [ -f plugins/$$p/main.go ] && $(GO) build -trimpath -tags '$(BUILD_TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN)/faultline-plugin-$$p ./plugins/$$p; done; true

# The release's images (pkg/image): the controller (launcher with the framework plugins), the
# node agent and the barrier, for every platform of IMAGE_PLATFORMS, tagged $(VERSION), as OCI
# image layouts in $(IMAGE_DIR)/<image>. No container engine and no base image: the binaries
# built here, glibc's runtime for the agent (it needs cgo for NVML) and the CA bundle from
# this machine's Debian packages. The same commit gives the same digests.
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
IMAGE_DIR       := _output/images
REGISTRY        ?= ghcr.io/faultline-dev
REVISION        ?= $(shell git rev-parse HEAD 2>/dev/null)
IMAGE_LDFLAGS   := $(LDFLAGS) -X github.com/faultline-dev/faultline/pkg/version.Revision=$(REVISION)
HOST_ARCH       := $(shell $(GO) env GOARCH)
# The agent's C compiler per architecture: the native gcc, else Debian's cross compiler
# (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross, or gcc-x86-64-linux-gnu
# libc6-dev-amd64-cross on an arm64 machine).
CC_amd64        ?= $(if $(filter amd64,$(HOST_ARCH)),gcc,x86_64-linux-gnu-gcc)
CC_arm64        ?= $(if $(filter arm64,$(HOST_ARCH)),gcc,aarch64-linux-gnu-gcc)

.PHONY: images
images: ## Build the three images for linux/amd64 and linux/arm64 into _output/images (OCI layouts tagged with the version).
	@for p in $(IMAGE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; dir=$(IMAGE_DIR)/bin/$${os}_$${arch}; mkdir -p $$dir; \
		case $$arch in amd64) cc='$(CC_amd64)' ;; arm64) cc='$(CC_arm64)' ;; *) echo "no C compiler known for $$arch" >&2; exit 1 ;; esac; \
		command -v $$cc >/dev/null || { echo "images: $$cc (the node agent's C compiler for $$arch) is missing; see CC_$$arch in the Makefile, or build this machine's platform alone: make images IMAGE_PLATFORMS=linux/$(HOST_ARCH) (no cross compiler)" >&2; exit 1; }; \
		for c in launcher faultline-barrier; do \
			GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -tags '$(BUILD_TAGS)' -ldflags '$(IMAGE_LDFLAGS)' -o $$dir/$$c ./cmd/$$c; \
		done; \
		for pl in $(PLUGINS); do \
			[ -f plugins/$$pl/main.go ] || continue; \
			GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -tags '$(BUILD_TAGS)' -ldflags '$(IMAGE_LDFLAGS)' -o $$dir/faultline-plugin-$$pl ./plugins/$$pl; \
		done; \
		GOOS=$$os GOARCH=$$arch CGO_ENABLED=1 CC=$$cc $(GO) build -trimpath -tags '$(BUILD_TAGS)' -ldflags '$(IMAGE_LDFLAGS)' -o $$dir/nodeagent ./cmd/nodeagent; \
	done
	@$(GO) run ./hack/images -version '$(VERSION)' -revision '$(REVISION)' -registry '$(REGISTRY)' \
		-bin-dir $(IMAGE_DIR)/bin -out $(IMAGE_DIR) -platforms '$(subst $(space),$(comma),$(strip $(IMAGE_PLATFORMS)))'

.PHONY: release
release: images release-files ## Push the images to REGISTRY (default ghcr.io/faultline-dev; credentials: ~/.docker/config.json) and write the release's files.
	$(GO) run ./hack/images -version '$(VERSION)' -revision '$(REVISION)' -registry '$(REGISTRY)' \
		-bin-dir $(IMAGE_DIR)/bin -out $(IMAGE_DIR) -platforms '$(subst $(space),$(comma),$(strip $(IMAGE_PLATFORMS)))' -push

# What a release publishes beside its images, for VERSION under REGISTRY: the manifests
# `launcher install` applies (for kubectl apply --server-side -f) and the Helm chart's archive.
RELEASE_DIR := _output/release
.PHONY: release-files
release-files: ## Write the release's manifests and Helm chart (VERSION, REGISTRY) into _output/release.
	@rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	$(GO) build -trimpath -tags '$(BUILD_TAGS)' -ldflags '$(LDFLAGS)' -o $(RELEASE_DIR)/.launcher ./cmd/launcher
	$(RELEASE_DIR)/.launcher install --print --registry '$(REGISTRY)' > $(RELEASE_DIR)/faultline.yaml && rm $(RELEASE_DIR)/.launcher
	$(GO) run ./hack/helmchart -version '$(VERSION)' -registry '$(REGISTRY)' -out $(RELEASE_DIR)/chart/faultline -package $(RELEASE_DIR)
	@rm -rf $(RELEASE_DIR)/chart && ls -l $(RELEASE_DIR)

.PHONY: tools
tools: ## Build every pinned tool: control plane, real nodes, kwok, Kueue, code generators (cached in _output/bin).
	@$(TOOLS)

# What the demo and the tests need, no more: `make demo` the control plane and kwok (and, with
# REAL_NODES=1, the kubelet, containerd and CoreDNS); `make test` both sets and Kueue (for
# test/e2e/kueue).
.PHONY: tools-demo tools-test
tools-demo:
	@$(TOOLS) $$($(TOOLS) set $(if $(REAL_NODES),test,demo))
tools-test:
	@$(TOOLS) $$($(TOOLS) set test)

.PHONY: generate
generate: ## Regenerate deepcopy code, the CRD, the controller's RBAC role and the Helm chart.
	@$(TOOLS) controller-gen
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd:generateEmbeddedObjectMeta=true paths=./api/... output:crd:artifacts:config=deploy/crd
	$(CONTROLLER_GEN) rbac:roleName=faultline-controller paths=./pkg/controller/... output:rbac:artifacts:config=deploy/controller
	$(GO) run ./hack/helmchart

.PHONY: proto
proto: ## Regenerate the framework plugin protocol's Go code (needs protoc: apt-get install protobuf-compiler).
	@$(TOOLS) proto
	protoc --proto_path=pkg/framework/proto \
		--plugin=protoc-gen-go=$(PROTOC_GEN_GO) --go_out=pkg/framework/proto --go_opt=paths=source_relative \
		--plugin=protoc-gen-go-grpc=$(PROTOC_GEN_GO_GRPC) --go-grpc_out=pkg/framework/proto --go-grpc_opt=paths=source_relative \
		pkg/framework/proto/framework.proto

.PHONY: test
test: tools-test build ## Unit, integration and e2e tests against a real local control plane and real nodes.
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

.PHONY: test-unit
test-unit: ## Only the tests that need no control plane.
	$(GO) test -short -count=1 ./...

.PHONY: lint
lint: ## gofmt, go vet and staticcheck.
	@$(TOOLS) staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^hack/tools/')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

# The binaries the demo runs.
DEMO_BINS := launcher nodeagent faultline-plugin-jax

.PHONY: demo
demo: ## Run the main scenario on a local control plane that it starts and stops itself (REAL_NODES=1: on real nodes; DEMO_FLAGS="-timeout 2m").
	@# The tools and the demo's own binaries build side by side: on a fresh machine the tools
	@# take minutes, and linking the product's binaries fits in their shadow.
	@start=$$SECONDS; \
	$(MAKE) --no-print-directory tools-demo & tools=$$!; \
	$(MAKE) --no-print-directory demo-bins & bins=$$!; \
	wait $$tools && wait $$bins; \
	[ $$((SECONDS - start)) -lt 5 ] || echo "demo: built what it needs in $$((SECONDS - start))s"
	_output/demo $(if $(REAL_NODES),-real-nodes) $(DEMO_FLAGS)

.PHONY: demo-bins
demo-bins:
	@mkdir -p $(BIN)
	@start=$$SECONDS; \
	for b in $(DEMO_BINS); do \
		case $$b in faultline-plugin-*) pkg=./plugins/$${b#faultline-plugin-} ;; *) pkg=./cmd/$$b ;; esac; \
		$(GO) build -trimpath -tags '$(BUILD_TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN)/$$b $$pkg; \
	done; \
	$(GO) build -o _output/demo ./hack/demo; \
	[ $$((SECONDS - start)) -lt 5 ] || echo "built $(DEMO_BINS) into $(BIN)/ and the demo in $$((SECONDS - start))s"

.PHONY: bench
bench: tools build ## Benchmarks on the local control plane (BENCH_FLAGS, e.g. -workers 8,256 -controller-manager-qps 200), then what the admission policies cost other pods.
	$(GO) run ./bench $(BENCH_FLAGS)
	$(GO) test -count=1 -run '^$$' -bench AdmissionCostOf -benchtime 1x ./test/e2e/trust

.PHONY: cluster-up
cluster-up: tools ## Start a persistent dev cluster with 8 fake GPU nodes; prints its kubeconfig path.
	@$(GO) run ./hack/devcluster up

.PHONY: cluster-down
cluster-down: ## Delete the dev cluster.
	@$(GO) run ./hack/devcluster down

.PHONY: clean
clean: ## Remove build outputs (keeps the cached tool binaries).
	rm -rf $(BIN) _output/kwok _output/test-logs
