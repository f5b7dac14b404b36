// Package fleet replays a published failure mix over a long training run at its published
// scale, and says what share of the wall-clock time each way of running it trains (its
// goodput, effective training time). It is a discrete-event model: the interruptions of each
// root cause arrive as a Poisson process at the rate the source reports; each costs the
// system's detection (its evidence, or the framework's timeout where it has none), its
// recovery (measured by the bench on this machine), the resume after it, and the work done
// since the last checkpoint; an application failure costs the restarts a system spends
// before it gives up, and the operator's fix. Every assumption is a field of Assumptions or
// System, each with its default and its source where one exists (docs/goodput.md).
package fleet

import "time"

// Kind is what a root cause looks like to the systems that run the gang.
type Kind string

const (
	// KindGPU is a GPU fault the driver reports (an XID): faultline's node agent has the
	// evidence at once, and the worker either exits on it or hangs (Assumptions.HangShare).
	KindGPU Kind = "gpu"
	// KindHost is a host that fails (its power, CPU, memory, disk): the node is lost, and its
	// pods with it once the control plane says so (System.NodeLost).
	KindHost Kind = "host"
	// KindShutdown is a host shut down unannounced (unplanned maintenance): the kubelet's
	// graceful shutdown ends its workers, and every system sees them end.
	KindShutdown Kind = "shutdown"
	// KindNetwork is a NIC, cable or switch: the gang's collectives stall, and no node agent
	// has evidence: every system waits for the framework's timeout.
	KindNetwork Kind = "network"
	// KindUnknown has no evidence at all (NCCL watchdog timeouts, silent data corruption):
	// the framework's timeout, for every system.
	KindUnknown Kind = "unknown"
	// KindApplication is the program's own fault (a bug, a broken dependency): a restart
	// fails again until the operator fixes it.
	KindApplication Kind = "application"
	// KindPlanned is a planned interruption (maintenance, an upgrade) announced ahead: the
	// system moves the gang, and with checkpoint on notice loses no work.
	KindPlanned Kind = "planned"
)

// Kinds lists every kind, in the order reports show them.
var Kinds = []Kind{KindGPU, KindHost, KindShutdown, KindNetwork, KindUnknown, KindApplication, KindPlanned}

// Row is one root cause of a mix: its count over the mix's horizon.
type Row struct {
	Cause string
	Count int
	Kind  Kind
}

// Mix is a published record of a training run's interruptions.
type Mix struct {
	Name   string
	Source string
	// Horizon is the wall-clock time the counts cover.
	Horizon time.Duration
	// GPUs and Workers are the run's size (Workers pods of GPUs/Workers GPUs each).
	GPUs, Workers int
	Rows          []Row
	// Reported is the goodput the source reports, as it words it.
	Reported string
}

// Count is the mix's interruptions of kind k.
func (m Mix) Count(k Kind) int {
	n := 0
	for _, r := range m.Rows {
		if r.Kind == k {
			n += r.Count
		}
	}
	return n
}

// Total is the mix's interruptions of every kind.
func (m Mix) Total() int {
	n := 0
	for _, r := range m.Rows {
		n += r.Count
	}
	return n
}

// Llama3 is Meta's Llama 3 405B pre-training snapshot: 54 days on 16,384 H100s (2,048 hosts
// of 8), 466 interruptions, 47 of them planned; the 419 unexpected ones by root cause as its
// Table 5 lists them. The kinds are ours: what each cause looks like to a scheduler and a node
// agent (the paper says which were GPU, host, network or software; the GPU rows are XIDs a
// driver reports; "Host Maintenance" is unplanned, so unannounced: a shutdown).
var Llama3 = Mix{
	Name:     "Llama 3 405B pre-training",
	Source:   "The Llama 3 Herd of Models, arXiv 2407.21783, section 3.3.4 and Table 5",
	Horizon:  54 * 24 * time.Hour,
	GPUs:     16384,
	Workers:  2048,
	Reported: "more than 90% effective training time",
	Rows: []Row{
		{"Faulty GPU", 148, KindGPU},
		{"GPU HBM3 Memory", 72, KindGPU},
		{"Software Bug", 54, KindApplication},
		{"Network Switch/Cable", 35, KindNetwork},
		{"Host Maintenance", 32, KindShutdown},
		{"GPU SRAM Memory", 19, KindGPU},
		{"GPU System Processor", 17, KindGPU},
		{"NIC", 7, KindNetwork},
		{"NCCL Watchdog Timeouts", 7, KindUnknown},
		{"Silent Data Corruption", 6, KindUnknown},
		{"GPU Thermal Interface + Sensor", 6, KindGPU},
		{"SSD", 3, KindHost},
		{"Power Supply", 3, KindHost},
		{"Server Chassis", 2, KindHost},
		{"IO Expansion Board", 2, KindHost},
		{"Dependency", 2, KindApplication},
		{"CPU", 2, KindHost},
		{"System Memory", 2, KindHost},
		{"Planned (automated maintenance, firmware, configuration)", 47, KindPlanned},
	},
}
