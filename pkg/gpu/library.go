package gpu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Library is the part of NVML the monitor uses. nvml.Interface satisfies it, and so do
// go-nvml's mocks (pkg/nvml/mock, mock/dgxa100), which is what tests use.
type Library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(index int) (nvml.Device, nvml.Return)
	EventSetCreate() (nvml.EventSet, nvml.Return)
}

var _ Library = nvml.Interface(nil)

// device is the part of an nvml.Device the monitor uses.
type device interface {
	GetUUID() (string, nvml.Return)
	GetIndex() (int, nvml.Return)
	GetMinorNumber() (int, nvml.Return)
	GetSupportedEventTypes() (uint64, nvml.Return)
	RegisterEvents(types uint64, set nvml.EventSet) nvml.Return
	GetMemoryInfo() (nvml.Memory, nvml.Return)
	GetRetiredPagesPendingStatus() (nvml.EnableState, nvml.Return)
	GetRemappedRows() (corrRows, uncRows int, isPending, failureOccurred bool, ret nvml.Return)
}

var _ device = nvml.Device(nil)

// NewNVML is the default Options.NewLibrary: the real libnvidia-ml, loaded on Init from
// path ("" = the dynamic loader's search path).
func NewNVML(path string) Library {
	if path == "" {
		return nvml.New()
	}
	return nvml.New(nvml.WithLibraryPath(path))
}

// nvmlLibName is what the driver installs and what go-nvml dlopens by default.
const nvmlLibName = "libnvidia-ml.so.1"

// driverLibDirs are where distributions and the GPU Operator's driver container put
// libnvidia-ml, relative to the driver root.
var driverLibDirs = []string{
	"usr/lib64",
	"usr/lib/x86_64-linux-gnu",
	"usr/lib/aarch64-linux-gnu",
	"lib64",
	"lib/x86_64-linux-gnu",
	"lib/aarch64-linux-gnu",
	"usr/lib",
	"lib",
}

// errNoLibrary: libnvidia-ml is not there; the monitor becomes a Null one.
var errNoLibrary = errors.New("libnvidia-ml not found")

// DriverRoot is where a platform puts the NVIDIA driver, relative to the node's root.
type DriverRoot struct {
	// Platform names who puts it there.
	Platform string
	// Path is the driver's root under the node's root ("" is the node's root itself).
	Path string
}

// DriverRoots are where platforms put the driver, in the order the agent looks when no
// --driver-root is given: the GPU Operator's driver container mounts it at
// /run/nvidia/driver; EKS's GPU AMIs and most on-prem nodes install it on the host; GKE's
// installer puts it under /home/kubernetes/bin/nvidia (its libraries in lib64).
var DriverRoots = []DriverRoot{
	{Platform: "the GPU Operator", Path: "run/nvidia/driver"},
	{Platform: "the host", Path: ""},
	{Platform: "GKE", Path: "home/kubernetes/bin/nvidia"},
}

// libraryPath picks the library to load: an explicit path wins; a driver root is searched in
// the usual directories; without one, each of DriverRoots under hostRoot (the node's root
// as the agent sees it) is, in order. Found nowhere, "" leaves the search to the dynamic
// loader, and tried says where it looked (for the agent's word on why it sees no GPU).
func libraryPath(explicit, driverRoot, hostRoot string) (path string, tried []string, err error) {
	if explicit != "" {
		return explicit, []string{explicit}, nil
	}
	if driverRoot != "" {
		if p, ok := underRoot(driverRoot); ok {
			return p, []string{driverRoot}, nil
		}
		if filepath.Clean(driverRoot) == "/" {
			return "", []string{"/", "the dynamic loader's path"}, nil
		}
		return "", []string{driverRoot}, fmt.Errorf("%w under driver root %s", errNoLibrary, driverRoot)
	}
	if hostRoot == "" {
		hostRoot = "/"
	}
	for _, r := range DriverRoots {
		root := filepath.Join(hostRoot, r.Path)
		tried = append(tried, root+" ("+r.Platform+")")
		if p, ok := underRoot(root); ok {
			return p, tried, nil
		}
	}
	return "", append(tried, "the dynamic loader's path"), nil
}

// underRoot finds libnvidia-ml in the usual library directories under a driver root.
func underRoot(root string) (string, bool) {
	for _, dir := range driverLibDirs {
		p := filepath.Join(root, dir, nvmlLibName)
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return "", false
}

// initLibrary runs Init and turns a library that cannot be loaded, or whose loading
// panics, into errNoLibrary.
func initLibrary(lib Library) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: loading it panicked: %v", errNoLibrary, r)
		}
	}()
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w: nvml init: %v", errNoLibrary, ret)
	default:
		return fmt.Errorf("nvml init: %v", ret)
	}
}
