#!/usr/bin/env bash
# Builds the pinned control plane, the real nodes' kubelet, containerd and CoreDNS, kwok, Kueue,
# code generators and linters into _output/bin/<component>-<version>/, skipping any binary that is
# already there, so only the first run on a machine pays for the build.
#
# Usage: hack/build-tools.sh [NAME...]      build these (default: all)
#        hack/build-tools.sh paths          print shell-sourceable paths
#        hack/build-tools.sh set demo|test|real-nodes|oldest   print the names a target needs
#        hack/build-tools.sh jobset-dir|kueue-dir       print where a module's manifests lie
#
# Binaries that come from one module and share most of their packages are built by one `go
# build` (one compile of the shared packages, links side by side); the groups one after the
# other (jobs, below). While it builds it prints what it builds, n of m, and the elapsed
# time; on a warm cache it prints nothing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
out="$root/_output/bin"

# Versions come from the tools modules' go.mod files, the one place they are pinned.
# A requirement is "MODULE VERSION" inside a require block or "require MODULE VERSION" alone.
modver() {
	awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "${2:-$tools/go.mod}"
}
K8S_VERSION=$(modver k8s.io/kubernetes)
# The oldest Kubernetes the default installation supports: the suite's second leg.
K8S_OLDEST_VERSION=$(modver k8s.io/kubernetes "$tools/kubernetes-oldest/go.mod")
ETCD_VERSION=$(modver go.etcd.io/etcd/server/v3)
KWOK_VERSION=$(modver sigs.k8s.io/kwok)
CONTROLLER_TOOLS_VERSION=$(modver sigs.k8s.io/controller-tools)
STATICCHECK_VERSION=$(modver honnef.co/go/tools)
PROTOBUF_VERSION=$(modver google.golang.org/protobuf)
PROTOC_GEN_GO_GRPC_VERSION=$(modver google.golang.org/grpc/cmd/protoc-gen-go-grpc)
JOBSET_VERSION=$(modver sigs.k8s.io/jobset)
CONTAINERD_VERSION=$(modver github.com/containerd/containerd/v2 "$tools/containerd/go.mod")
COREDNS_VERSION=$(modver github.com/coredns/coredns "$tools/coredns/go.mod")
KUEUE_VERSION=$(modver sigs.k8s.io/kueue "$tools/kueue/go.mod")

k8s_ldflags() { # VERSION
	local v=${1#v} major minor
	major=${v%%.*}; minor=${v#*.}; minor=${minor%%.*}
	local f=""
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		f+=" -X $pkg.gitVersion=$1 -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		f+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	echo "-s -w$f"
}

# Sets of names for the Makefile's targets: what `make demo` needs (the control plane and
# kwok, as test/cluster.FindTools builds them), what the real nodes add, what `make test`
# needs (both, Kueue for test/e2e/kueue, and the oldest supported control plane and kubelet
# for test/e2e/oldest), and everything.
set_demo=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl)
set_real=(kubelet containerd coredns)
set_oldest=(oldest-kube-apiserver oldest-kube-controller-manager oldest-kube-scheduler oldest-kubelet)
set_test_only=(kueue "${set_oldest[@]}")
set_all=("${set_demo[@]}" "${set_real[@]}" "${set_test_only[@]}" controller-gen staticcheck)

# group NAME: the build group of a binary: its module dir, output dir, packages (one per
# binary of the group), ldflags and tags. Binaries of one group are built together.
group_of() {
	case $1 in
	kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kubelet) echo kubernetes ;;
	oldest-*) echo kubernetes-oldest ;;
	containerd | containerd-shim-runc-v2 | ctr) echo containerd ;;
	kwok | kwokctl) echo kwok ;;
	protoc-gen-go | protoc-gen-go-grpc) echo "$1" ;;
	*) echo "$1" ;;
	esac
}

# spec GROUP: sets dir, module, ldflags, tags and pkgs (name=package) of a group. A binary's
# file is its name less a version prefix ("oldest-").
spec() {
	module=$tools ldflags="-s -w" tags=""
	case $1 in
	etcd) dir=$out/etcd-$ETCD_VERSION pkgs=(etcd=go.etcd.io/etcd/server/v3) ;;
	kubernetes)
		dir=$out/kubernetes-$K8S_VERSION ldflags=$(k8s_ldflags "$K8S_VERSION")
		pkgs=()
		for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do pkgs+=("$b=k8s.io/kubernetes/cmd/$b"); done
		;;
	# The oldest supported release: its control plane and kubelet (the newest kubectl serves
	# both), from a module of its own, since one module holds one k8s.io/kubernetes.
	kubernetes-oldest)
		dir=$out/kubernetes-$K8S_OLDEST_VERSION module=$tools/kubernetes-oldest ldflags=$(k8s_ldflags "$K8S_OLDEST_VERSION")
		pkgs=()
		for b in kube-apiserver kube-controller-manager kube-scheduler kubelet; do pkgs+=("oldest-$b=k8s.io/kubernetes/cmd/$b"); done
		;;
	kwok) dir=$out/kwok-$KWOK_VERSION pkgs=(kwok=sigs.k8s.io/kwok/cmd/kwok kwokctl=sigs.k8s.io/kwok/cmd/kwokctl) ;;
	# containerd 2.x (what Kubernetes 1.36 supports), its runc shim and ctr, from a module of
	# their own; no_btrfs: the btrfs snapshotter needs cgo headers and nothing uses it.
	containerd)
		dir=$out/containerd-$CONTAINERD_VERSION module=$tools/containerd tags=no_btrfs
		pkgs=()
		for b in containerd containerd-shim-runc-v2 ctr; do pkgs+=("$b=github.com/containerd/containerd/v2/cmd/$b"); done
		;;
	# CoreDNS with only the plugins the real nodes use (hack/tools/coredns/main.go).
	coredns) dir=$out/coredns-$COREDNS_VERSION module=$tools/coredns pkgs=(coredns=github.com/faultline-dev/faultline/hack/tools/coredns) ;;
	# Kueue's manager alone (not its kubectl plugin, importer or UI), from a module of its
	# own: it requires Kubeflow's, Ray's and cert-manager's APIs, which must not move the
	# control plane's dependencies. The version is stamped as upstream's Makefile does.
	kueue)
		dir=$out/kueue-$KUEUE_VERSION module=$tools/kueue pkgs=(kueue=sigs.k8s.io/kueue/cmd/kueue)
		ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
		;;
	controller-gen) dir=$out/controller-tools-$CONTROLLER_TOOLS_VERSION pkgs=(controller-gen=sigs.k8s.io/controller-tools/cmd/controller-gen) ;;
	staticcheck) dir=$out/staticcheck-$STATICCHECK_VERSION pkgs=(staticcheck=honnef.co/go/tools/cmd/staticcheck) ;;
	protoc-gen-go) dir=$out/protobuf-$PROTOBUF_VERSION pkgs=(protoc-gen-go=google.golang.org/protobuf/cmd/protoc-gen-go) ;;
	protoc-gen-go-grpc) dir=$out/protoc-gen-go-grpc-$PROTOC_GEN_GO_GRPC_VERSION pkgs=(protoc-gen-go-grpc=google.golang.org/grpc/cmd/protoc-gen-go-grpc) ;;
	jobset) dir=$out/jobset-$JOBSET_VERSION pkgs=(jobset=sigs.k8s.io/jobset) ;;
	*) echo "unknown tool group $1" >&2; exit 2 ;;
	esac
}

# build_group GROUP NAME...: builds the named binaries of a group that are missing, with one
# `go build` into a temporary directory, then moves them into place (a build that is killed
# leaves no half-written binary behind).
build_group() {
	local g=$1; shift
	local dir module ldflags tags pkgs
	spec "$g"
	local want=() names=() p n
	for p in "${pkgs[@]}"; do
		n=${p%%=*}
		for w in "$@"; do
			if [ "$w" = "$n" ] && [ ! -x "$dir/$(file_of "$n")" ]; then want+=("${p#*=}"); names+=("$(file_of "$n")"); fi
		done
	done
	[ ${#want[@]} -gt 0 ] || return 0
	mkdir -p "$dir"
	local tmp
	tmp=$(mktemp -d "$dir/.build.XXXXXX")
	# One package builds to -o FILE; several to -o DIR/ (each named after its package's dir).
	local o=$tmp/
	[ ${#want[@]} -gt 1 ] || o=$tmp/${names[0]}
	if ! (cd "$module" && CGO_ENABLED=0 go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$o" "${want[@]}"); then
		rm -rf "$tmp"
		return 1
	fi
	for n in "${names[@]}"; do mv "$tmp/$n" "$dir/$n"; done
	rm -rf "$tmp"
}

file_of() { echo "${1#oldest-}"; } # NAME: the binary's file name

missing() { # NAME: is the binary absent?
	local dir module ldflags tags pkgs
	spec "$(group_of "$1")"
	[ ! -x "$dir/$(file_of "$1")" ]
}

# build_order is the order groups start in: Kubernetes first, then what reuses most of the
# packages it compiled (kwok: the same k8s.io libraries; etcd: the same etcd client), then
# the rest, the oldest supported Kubernetes (its own versions of everything) last but one.
build_order=(kubernetes kwok etcd kubernetes-oldest kueue containerd coredns controller-gen staticcheck protoc-gen-go protoc-gen-go-grpc jobset)

# jobs is how many groups build at once. Each `go build` already keeps every core busy
# compiling; two groups side by side compile the packages they share (the standard library,
# the k8s.io libraries) twice, where one after the other the second finds them in the build
# cache. TOOLS_BUILD_JOBS overrides it (a machine with many cores may gain from more).
jobs=${TOOLS_BUILD_JOBS:-1}

build_all() {
	local names=("$@") groups=() members=() n g i
	for n in "${names[@]}"; do
		g=$(group_of "$n")
		[[ " ${build_order[*]} " == *" $g "* ]] || { echo "build-tools.sh: group $g (of $n) is not in build_order" >&2; exit 2; }
	done
	for g in "${build_order[@]}"; do
		local these=""
		for n in "${names[@]}"; do
			[ "$(group_of "$n")" = "$g" ] && missing "$n" && these+=" $n"
		done
		[ -z "$these" ] || { groups+=("$g"); members+=("${these# }"); }
	done
	local m=${#groups[@]}
	[ "$m" -gt 0 ] || return 0
	local start=$SECONDS logdir pids=() done_flags=() next=0 running=0
	logdir=$(mktemp -d)
	trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$logdir"' EXIT
	echo "building $m tool group(s) into ${out#$root/}, $jobs at a time (first run on this machine; later runs skip this):" >&2
	# Progress: one line when each group starts and ends, and every 20 s the groups building.
	local left=$m failed=0 last=$SECONDS
	while [ "$left" -gt 0 ]; do
		while [ "$running" -lt "$jobs" ] && [ "$next" -lt "$m" ]; do
			i=$next
			# shellcheck disable=SC2086 # members are words
			(
				s=$SECONDS
				build_group "${groups[$i]}" ${members[$i]} >"$logdir/$i.log" 2>&1 && echo "$((SECONDS - s))" >"$logdir/$i.ok"
			) &
			pids[$i]=$!
			echo "  [$((i + 1))/$m] ${groups[$i]}: ${members[$i]} (elapsed $((SECONDS - start))s)" >&2
			next=$((next + 1)) running=$((running + 1))
		done
		sleep 1
		left=0 running=0
		for i in "${!pids[@]}"; do
			[ -z "${done_flags[$i]:-}" ] || continue
			if kill -0 "${pids[$i]}" 2>/dev/null; then running=$((running + 1)); continue; fi
			wait "${pids[$i]}" || true
			done_flags[$i]=1
			if [ -f "$logdir/$i.ok" ]; then
				echo "  [$(( ${#done_flags[@]} ))/$m] built ${groups[$i]} in $(cat "$logdir/$i.ok")s (elapsed $((SECONDS - start))s)" >&2
			else
				failed=1
				echo "  [$(( ${#done_flags[@]} ))/$m] FAILED ${groups[$i]}:" >&2
				sed 's/^/      /' "$logdir/$i.log" >&2
			fi
		done
		left=$((m - ${#done_flags[@]}))
		if [ "$running" -gt 0 ] && [ $((SECONDS - last)) -ge 20 ]; then
			last=$SECONDS
			local still=()
			for i in "${!pids[@]}"; do [ -n "${done_flags[$i]:-}" ] || still+=("${groups[$i]}"); done
			echo "  ... still building ${still[*]} ($(( ${#done_flags[@]} ))/$m done, elapsed $((SECONDS - start))s)" >&2
		fi
	done
	trap - EXIT
	rm -rf "$logdir"
	[ "$failed" -eq 0 ] || exit 1
	echo "built $m tool group(s) in $((SECONDS - start))s" >&2
}

case ${1:-} in
paths)
	# Shell-sourceable paths for the Makefile and the test harness.
	echo "ETCD_BIN=$out/etcd-$ETCD_VERSION/etcd"
	echo "KUBE_BIN_DIR=$out/kubernetes-$K8S_VERSION"
	echo "KUBE_OLDEST_BIN_DIR=$out/kubernetes-$K8S_OLDEST_VERSION"
	echo "KWOK_BIN_DIR=$out/kwok-$KWOK_VERSION"
	echo "CONTAINERD_BIN_DIR=$out/containerd-$CONTAINERD_VERSION"
	echo "COREDNS_BIN=$out/coredns-$COREDNS_VERSION/coredns"
	echo "CONTROLLER_GEN=$out/controller-tools-$CONTROLLER_TOOLS_VERSION/controller-gen"
	echo "STATICCHECK=$out/staticcheck-$STATICCHECK_VERSION/staticcheck"
	echo "PROTOC_GEN_GO=$out/protobuf-$PROTOBUF_VERSION/protoc-gen-go"
	echo "PROTOC_GEN_GO_GRPC=$out/protoc-gen-go-grpc-$PROTOC_GEN_GO_GRPC_VERSION/protoc-gen-go-grpc"
	echo "JOBSET_BIN=$out/jobset-$JOBSET_VERSION/jobset"
	echo "KUEUE_BIN=$out/kueue-$KUEUE_VERSION/kueue"
	exit 0
	;;
set)
	case ${2:-} in
	demo) echo "${set_demo[*]}" ;;
	oldest) echo "${set_oldest[*]}" ;;
	real-nodes) echo "${set_real[*]}" ;;
	test) echo "${set_demo[*]} ${set_real[*]} ${set_test_only[*]}" ;;
	*) echo "usage: $0 set demo|real-nodes|oldest|test" >&2; exit 2 ;;
	esac
	exit 0
	;;
# Where JobSet's module (its CRD and webhook manifests) lies in the module cache.
jobset-dir) (cd "$tools" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset); exit 0 ;;
# Where Kueue's module (its CRDs and webhook manifests) lies in the module cache.
kueue-dir) (cd "$tools/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue); exit 0 ;;
esac

want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${set_all[@]}")
names=()
for name in "${want[@]}"; do
	case $name in
	# containerd comes with its shim and ctr: the real nodes need all three.
	containerd) names+=(containerd containerd-shim-runc-v2 ctr) ;;
	# The protoc plugins that `make proto` runs; not in the default set, since the generated
	# code is committed and nothing else needs them. protoc itself comes from the system
	# (Debian: protobuf-compiler).
	proto) names+=(protoc-gen-go protoc-gen-go-grpc) ;;
	# JobSet, for side-by-side benchmarks only (make bench); not in the default set.
	# The oldest supported release's control plane and kubelet (test/e2e/oldest).
	oldest) names+=("${set_oldest[@]}") ;;
	etcd | kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kubelet | kwok | kwokctl | oldest-* | \
		coredns | controller-gen | staticcheck | jobset | kueue | containerd-shim-runc-v2 | ctr) names+=("$name") ;;
	*) echo "unknown tool $name" >&2; exit 2 ;;
	esac
done
build_all "${names[@]}"
