package inplace

import "sync"

// podQueues runs the runtime's events of each pod in the order they came, one after another,
// and different pods' at once, at most limit of them: an exit's report is a write to the API
// server (a tenth of a second and more on a busy one), and a node that shuts down ends all
// its pods within a second, so handled one after another on the event stream, the sixteenth
// pod's exit, and every sandbox stop behind them, waited seconds for the fifteen before it
// (bench/results/README.md, "A moved index through the API, and the shutdown's burst"). One
// pod's events stay in order: its exit's report must not overtake the report of an exit
// before it.
type podQueues struct {
	mu sync.Mutex
	// queued holds, for each pod whose events are being handled, those waiting behind.
	queued map[string][]func()
	slots  chan struct{}
	wg     sync.WaitGroup
}

func newPodQueues(limit int) *podQueues {
	return &podQueues{queued: map[string][]func(){}, slots: make(chan struct{}, limit)}
}

// do runs f after the pod's events queued before it.
func (q *podQueues) do(pod string, f func()) {
	q.mu.Lock()
	if waiting, busy := q.queued[pod]; busy {
		q.queued[pod] = append(waiting, f)
		q.mu.Unlock()
		return
	}
	q.queued[pod] = nil
	q.mu.Unlock()
	q.wg.Add(1)
	go q.drain(pod, f)
}

// drain runs f and then the pod's events queued behind it, until none is left.
func (q *podQueues) drain(pod string, f func()) {
	defer q.wg.Done()
	q.slots <- struct{}{}
	defer func() { <-q.slots }()
	for {
		f()
		q.mu.Lock()
		waiting := q.queued[pod]
		if len(waiting) == 0 {
			delete(q.queued, pod)
			q.mu.Unlock()
			return
		}
		f, q.queued[pod] = waiting[0], waiting[1:]
		q.mu.Unlock()
	}
}

// wait returns once every event handed to do has been handled.
func (q *podQueues) wait() { q.wg.Wait() }
