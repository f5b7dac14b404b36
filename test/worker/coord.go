package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
)

// The coordination protocol: JSON lines over one TCP connection per task. It keeps what
// faultline depends on in XLA's coordination service (xla/tsl/distributed_runtime/
// coordination/coordination_service.cc), not its wire format (gRPC):
//
//   - every task registers its index with an incarnation id (random per process);
//   - a task that registers while the same index is connected under another incarnation is
//     refused, the index is put in error and the error goes to every task
//     (RegisterTaskAsync: "… unexpectedly tried to connect with a different incarnation.
//     It has likely restarted.");
//   - a heartbeat under another incarnation is refused the same way (RecordHeartbeat:
//     "Incarnation ID mismatch");
//   - a task that stops heartbeating is reported to every task ("The following tasks are
//     unhealthy (stopped sending heartbeats)"). A closed connection counts at once unless
//     heartbeatsOnly: the real service waits for its heartbeat timeout (JAX's default is
//     100 s), during which the other tasks live on, which only slows most tests down;
//   - registration is a barrier: no task starts before all have registered.
type message struct {
	Op          string `json:"op"`
	Task        int    `json:"task,omitempty"`
	Incarnation uint64 `json:"incarnation,omitempty"`
	Attempt     string `json:"attempt,omitempty"`
	// Status is an error in absl::Status's text form ("ABORTED: …").
	Status string `json:"status,omitempty"`
	// Tasks are the registered tasks, on "start".
	Tasks []int `json:"tasks,omitempty"`
}

// Operations.
const (
	opRegister  = "register"
	opHeartbeat = "heartbeat"
	opStart     = "start"
	opError     = "error"
)

// server is the coordination service that task 0 hosts.
type server struct {
	job     string
	world   int
	timeout time.Duration // heartbeat timeout
	// heartbeatsOnly: a closed connection is no news; only the heartbeat timeout is.
	heartbeatsOnly bool
	logf           func(format string, args ...any)

	mu      sync.Mutex
	tasks   map[int]*taskState
	started bool
	failed  string // the error every task got; no registration succeeds after it
}

type taskState struct {
	incarnation uint64
	conn        net.Conn
	enc         *json.Encoder
	last        time.Time
}

func newServer(job string, world int, timeout time.Duration, heartbeatsOnly bool, logf func(string, ...any)) *server {
	return &server{job: job, world: world, timeout: timeout, heartbeatsOnly: heartbeatsOnly, logf: logf, tasks: map[int]*taskState{}}
}

func (s *server) taskName(i int) string { return fmt.Sprintf("/job:%s/replica:0/task:%d", s.job, i) }

// serve accepts tasks until ln is closed.
func (s *server) serve(ln net.Listener) {
	go s.checkHeartbeats()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go s.handle(conn)
	}
}

func (s *server) handle(conn net.Conn) {
	defer conn.Close()
	dec := json.NewDecoder(bufio.NewReader(conn))
	enc := json.NewEncoder(conn)
	var first message
	if err := dec.Decode(&first); err != nil || first.Op != opRegister {
		return
	}
	task := first.Task
	if !s.register(conn, enc, first) {
		return
	}
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			s.lost(task, conn, err)
			return
		}
		if m.Op == opHeartbeat {
			s.heartbeat(task, conn, m.Incarnation)
		}
	}
}

// register connects a task, or refuses it as the coordination service does.
func (s *server) register(conn net.Conn, enc *json.Encoder, m message) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := s.taskName(m.Task)
	if m.Task < 0 || m.Task >= s.world {
		_ = enc.Encode(message{Op: opError, Status: "INVALID_ARGUMENT: Unexpected task registered with task_name=" + name})
		return false
	}
	if s.failed != "" {
		_ = enc.Encode(message{Op: opError, Status: s.failed})
		return false
	}
	t := s.tasks[m.Task]
	switch {
	case t == nil:
		s.tasks[m.Task] = &taskState{incarnation: m.Incarnation, conn: conn, enc: enc, last: time.Now()}
		s.logf("coordinator: registered task %d (%s) incarnation %d from %s, attempt %s", m.Task, name, m.Incarnation, conn.RemoteAddr(), m.Attempt)
	case t.incarnation == m.Incarnation:
		// A retried registration of the same process.
		t.conn, t.enc, t.last = conn, enc, time.Now()
	default:
		status := "ABORTED: " + name + " unexpectedly tried to connect with a different incarnation. It has likely restarted."
		s.logf("coordinator: REFUSED duplicate registration of task %d: incarnation %d while %d is connected (attempt %s): %s",
			m.Task, m.Incarnation, t.incarnation, m.Attempt, status)
		_ = enc.Encode(message{Op: opError, Status: status})
		s.failLocked(status)
		return false
	}
	if !s.started && len(s.tasks) == s.world {
		s.started = true
		var ids []int
		for i := range s.tasks {
			ids = append(ids, i)
		}
		sort.Ints(ids)
		s.logf("coordinator: all %d tasks registered: %v", s.world, ids)
		for _, t := range s.tasks {
			_ = t.enc.Encode(message{Op: opStart, Tasks: ids})
		}
	} else if s.started {
		_ = enc.Encode(message{Op: opStart})
	}
	return true
}

func (s *server) heartbeat(task int, conn net.Conn, incarnation uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[task]
	if t == nil || t.conn != conn {
		return
	}
	if t.incarnation != incarnation {
		status := fmt.Sprintf("ABORTED: %s Heartbeat: Incarnation ID mismatch: expecting %d but got %d. The task has restarted and likely crashed earlier - check for any earlier errors or any scheduler events (e.g. preemption, eviction) to debug further.",
			s.taskName(task), t.incarnation, incarnation)
		s.logf("coordinator: %s", status)
		s.failLocked(status)
		return
	}
	t.last = time.Now()
}

// lost: a registered task's connection ended.
func (s *server) lost(task int, conn net.Conn, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[task]
	if t == nil || t.conn != conn || s.failed != "" {
		return
	}
	if err != io.EOF {
		s.logf("coordinator: task %d connection: %v", task, err)
	}
	if s.heartbeatsOnly {
		s.logf("coordinator: task %d's connection closed; it is lost if no heartbeat comes within %s", task, s.timeout)
		return
	}
	s.failLocked(s.unhealthy([]int{task}))
}

func (s *server) checkHeartbeats() {
	for range time.Tick(s.timeout / 4) {
		s.mu.Lock()
		var stale []int
		for i, t := range s.tasks {
			if time.Since(t.last) > s.timeout {
				stale = append(stale, i)
			}
		}
		if len(stale) > 0 && s.failed == "" {
			sort.Ints(stale)
			s.failLocked(s.unhealthy(stale))
		}
		s.mu.Unlock()
	}
}

func (s *server) unhealthy(tasks []int) string {
	var names []string
	for _, t := range tasks {
		names = append(names, s.taskName(t))
	}
	return "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n" + strings.Join(names, "\n") +
		"\nThe tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further."
}

// failLocked puts the service in error and sends the error to every connected task, as
// PropagateError does; every task then ends.
func (s *server) failLocked(status string) {
	if s.failed != "" {
		return
	}
	s.failed = status
	s.logf("coordinator: propagating the error to every task: %s", firstLine(status))
	for _, t := range s.tasks {
		_ = t.enc.Encode(message{Op: opError, Status: status})
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
