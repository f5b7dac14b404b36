// Command fakegpu is a device plugin for GPUs that do not exist: it speaks the kubelet's real
// device-plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), registers nvidia.com/gpu
// with the devices it is given (fake UUIDs), and allocates them as NVIDIA's plugin does,
// naming them in NVIDIA_VISIBLE_DEVICES. The kubelet then accounts for them and answers
// PodResources List with real assignments, which is what the node agent maps GPU faults
// with. The real nodes of the test substrate run one per node, in the node's mount
// namespace, where the kubelet's device-plugin socket is.
//
// With --dra-driver it is a DRA driver of the GPUs instead (dra.go): the way a cluster
// allocates GPUs through ResourceClaims.
//
//	fakegpu --uuids GPU-…,GPU-… [--resource nvidia.com/gpu] [--dir /var/lib/kubelet/device-plugins/]
//	fakegpu --uuids GPU-…,GPU-… --dra-driver gpu.example.com --kubeconfig F --node-name N [--kubelet-dir D]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// envVisibleDevices is where NVIDIA's container toolkit reads the GPUs a container gets.
const envVisibleDevices = "NVIDIA_VISIBLE_DEVICES"

func main() {
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource to register")
	uuids := flag.String("uuids", "", "comma-separated device IDs (GPU UUIDs), in index order")
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	health := flag.String("health-file", "", "a file whose lines are the IDs of the devices to report Unhealthy (read every 100 ms; none: all healthy), as NVIDIA's plugin reports a GPU after a fatal XID")
	draName := flag.String("dra-driver", "", "serve the GPUs as this DRA driver instead of as a device plugin (needs --kubeconfig and --node-name)")
	kubeconfig := flag.String("kubeconfig", "", "DRA: the kubeconfig the driver publishes its ResourceSlice with")
	node := flag.String("node-name", "", "DRA: the node, the name of the driver's pool")
	kubeletDir := flag.String("kubelet-dir", "/var/lib/kubelet", "DRA: the kubelet's root directory (its plugins_registry and plugins)")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "DRA: where the container runtime reads CDI specs")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *uuids == "" {
		log.Error("--uuids is required: the fake GPUs' UUIDs")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *draName != "" {
		if *kubeconfig == "" || *node == "" {
			log.Error("--dra-driver needs --kubeconfig and --node-name")
			os.Exit(2)
		}
		d := &draDriver{name: *draName, node: *node, devices: strings.Split(*uuids, ","), cdiDir: *cdiDir, healthFile: *health, log: log}
		if err := runDRA(ctx, d, *kubeconfig, *kubeletDir); !errors.Is(err, context.Canceled) {
			log.Error("DRA driver failed", "error", err)
			os.Exit(1)
		}
		return
	}
	p := &plugin{resource: *resource, devices: strings.Split(*uuids, ","), dir: *dir, healthFile: *health, log: log}
	// run returns only when it fails or is told to stop.
	if err := p.run(ctx); !errors.Is(err, context.Canceled) {
		log.Error("device plugin failed", "error", err)
		os.Exit(1)
	}
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource   string
	devices    []string
	dir        string
	healthFile string
	log        *slog.Logger
}

var _ pluginapi.DevicePluginServer = &plugin{}

// socket is the plugin's own socket in the kubelet's directory.
func (p *plugin) socket() string {
	return filepath.Join(p.dir, "fakegpu-"+strings.NewReplacer("/", "-", ".", "-").Replace(p.resource)+".sock")
}

// run serves and registers, and does it again whenever the kubelet restarts: a kubelet
// that starts removes every socket in its directory, so a missing socket means the plugin
// must come back (as NVIDIA's plugin watches its socket for the same reason).
func (p *plugin) run(ctx context.Context) error {
	for {
		srv, err := p.serve()
		if err != nil {
			return err
		}
		if err := p.register(ctx); err != nil {
			srv.Stop()
			return err
		}
		p.log.Info("registered with the kubelet", "resource", p.resource, "devices", p.devices, "socket", p.socket())
		err = p.waitSocketGone(ctx)
		srv.Stop()
		if err != nil {
			return err
		}
		p.log.Info("socket removed (the kubelet restarted): registering again")
	}
}

func (p *plugin) serve() (*grpc.Server, error) {
	if err := os.Remove(p.socket()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	ln, err := net.Listen("unix", p.socket())
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", p.socket(), err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

func (p *plugin) register(ctx context.Context) error {
	kubelet := filepath.Join(p.dir, filepath.Base(pluginapi.KubeletSocket))
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	// The kubelet may still be starting: retry for a while.
	deadline := time.Now().Add(60 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
			Version: pluginapi.Version, Endpoint: filepath.Base(p.socket()), ResourceName: p.resource,
			Options: &pluginapi.DevicePluginOptions{},
		})
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("register %s with the kubelet at %s: %w", p.resource, kubelet, err)
			}
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (p *plugin) waitSocketGone(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if _, err := os.Stat(p.socket()); errors.Is(err, os.ErrNotExist) {
				return nil
			}
		}
	}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices, and again whenever the health file changes which of them
// are Unhealthy, until the stream ends.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	sent := ""
	for {
		unhealthy := p.unhealthy()
		if key := strings.Join(unhealthy, ","); sent == "" || key != sent[1:] {
			resp := &pluginapi.ListAndWatchResponse{}
			for _, id := range p.devices {
				health := pluginapi.Healthy
				if slices.Contains(unhealthy, id) {
					health = pluginapi.Unhealthy
				}
				resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: health})
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
			p.log.Info("devices sent", "unhealthy", unhealthy)
			sent = "=" + key
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-tick.C:
		}
	}
}

// unhealthy are the device IDs the health file lists.
func (p *plugin) unhealthy() []string { return unhealthyIn(p.healthFile, p.devices) }

// unhealthyIn are those of devices that file lists, sorted (none without a file).
func unhealthyIn(file string, devices []string) []string {
	if file == "" {
		return nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var ids []string
	for _, line := range strings.Fields(string(b)) {
		if slices.Contains(devices, line) {
			ids = append(ids, line)
		}
	}
	slices.Sort(ids)
	return ids
}

// Allocate gives each container the devices the kubelet chose for it.
func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		p.log.Info("allocate", "devices", c.DevicesIds)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{envVisibleDevices: strings.Join(c.DevicesIds, ",")},
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
