package inplace

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FakeRuntime is a Runtime for the restarter's own tests and its callers': containers are
// what tests put in Containers; StopContainer marks one exited; ExecSync answers ExecExit.
// The *Err fields inject errors.
type FakeRuntime struct {
	mu         sync.Mutex
	Containers []*runtimeapi.Container
	// Stops and Execs record the calls: the container and its timeout, the container and
	// its command.
	Stops []FakeStop
	Execs []FakeExec
	// ExecExit is the exit code ExecSync returns, per container ID (default 0).
	ExecExit                  map[string]int32
	ListErr, StopErr, ExecErr error
	// ExitOnExec: an ExecSync that answers 0 exits the container (exit 0), as an opened
	// barrier does; with ExecKilled the exec answers 137 instead, killed by that exit.
	ExitOnExec, ExecKilled bool
	// ExitCodes are the exit codes ContainerStatus reports for exited containers (default 0).
	ExitCodes map[string]int32
	StatusErr error
	// StatusExited are containers that ContainerStatus reports exited while ListContainers
	// still lists them running: a barrier that ended between the two calls.
	StatusExited map[string]bool
	// PIDs are the processes a verbose ContainerStatus names, as containerd's info does
	// ({"pid": N}), per container ID (none: no info).
	PIDs map[string]int
	// StopBlock, when set, holds every StopContainer until it is closed, as a worker that
	// takes its whole grace period to exit does.
	StopBlock chan struct{}
}

var _ Runtime = &FakeRuntime{}

// FakeStop and FakeExec are calls a FakeRuntime received.
type FakeStop struct {
	ID      string
	Timeout int64
}

type FakeExec struct {
	ID  string
	Cmd []string
}

func (f *FakeRuntime) ListContainers(_ context.Context, in *runtimeapi.ListContainersRequest, _ ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ListErr != nil {
		return nil, f.ListErr
	}
	var out []*runtimeapi.Container
	for _, c := range f.Containers {
		if in.Filter != nil && in.Filter.State != nil && in.Filter.State.State != c.State {
			continue
		}
		match := true
		for k, v := range in.GetFilter().GetLabelSelector() {
			match = match && c.Labels[k] == v
		}
		if match {
			out = append(out, c)
		}
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

func (f *FakeRuntime) StopContainer(ctx context.Context, in *runtimeapi.StopContainerRequest, _ ...grpc.CallOption) (*runtimeapi.StopContainerResponse, error) {
	if f.StopBlock != nil {
		select {
		case <-f.StopBlock:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.StopErr != nil {
		return nil, f.StopErr
	}
	f.Stops = append(f.Stops, FakeStop{ID: in.ContainerId, Timeout: in.Timeout})
	f.exit(in.ContainerId)
	return &runtimeapi.StopContainerResponse{}, nil
}

func (f *FakeRuntime) ExecSync(_ context.Context, in *runtimeapi.ExecSyncRequest, _ ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Execs = append(f.Execs, FakeExec{ID: in.ContainerId, Cmd: in.Cmd})
	if f.ExecErr != nil {
		return nil, f.ExecErr
	}
	code := f.ExecExit[in.ContainerId]
	if code == 0 && f.ExitOnExec {
		f.exit(in.ContainerId)
		if f.ExecKilled {
			code = 137
		}
	}
	return &runtimeapi.ExecSyncResponse{ExitCode: code}, nil
}

func (f *FakeRuntime) ContainerStatus(_ context.Context, in *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.StatusErr != nil {
		return nil, f.StatusErr
	}
	for _, c := range f.Containers {
		if c.Id == in.ContainerId {
			resp := &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
				Id: c.Id, State: c.State, ExitCode: f.ExitCodes[c.Id], Labels: c.Labels,
			}}
			if f.StatusExited[c.Id] {
				resp.Status.State = runtimeapi.ContainerState_CONTAINER_EXITED
				return resp, nil // an exited container has no process to name
			}
			if pid, ok := f.PIDs[c.Id]; ok && in.Verbose {
				resp.Info = map[string]string{"info": fmt.Sprintf(`{"sandboxID":"s","pid":%d}`, pid)}
			}
			return resp, nil
		}
	}
	return nil, status.Error(codes.NotFound, "no container "+in.ContainerId)
}

func (f *FakeRuntime) exit(id string) {
	for _, c := range f.Containers {
		if c.Id == id {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
		}
	}
}
