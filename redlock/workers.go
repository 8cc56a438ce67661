package redlock

import "sync"

// workers runs the node requests of rounds (round.run) on goroutines that
// outlive a round. A goroutine started for one request begins with a small
// stack, and a go-redis request (a write, then a read that parks in the
// netpoller) is deep enough to grow it: every request of a fresh goroutine
// paid a stack copy, a tenth of the CPU of a healthy lock+unlock. A worker
// grows its stack once and keeps it.
//
// Workers that finish wait, most recently used first, for the next request;
// past maxIdle of them waiting, a worker ends instead, so a burst of
// requests leaves at most maxIdle goroutines behind. Close ends them all
// and waits for them: the Client's Close calls it once no round runs.
type workers struct {
	mu      sync.Mutex
	idle    []*worker // the most recently used last
	maxIdle int
	live    int // worker goroutines started and not yet ended
	closed  bool
	wg      sync.WaitGroup
}

// worker is one goroutine; jobs hands it its next request.
type worker struct {
	jobs chan job
}

// job is one node's request in a round.
type job struct {
	r *round
	i int
}

func newWorkers(maxIdle int) *workers {
	return &workers{maxIdle: maxIdle}
}

// start runs node i's request of r on an idle worker, or on a new one. The
// Client has counted the request (enter), so start never runs after Close.
func (w *workers) start(r *round, i int) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		wk := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		wk.jobs <- job{r, i}
		return
	}
	w.wg.Add(1)
	w.live++
	w.mu.Unlock()
	go w.loop(job{r, i})
}

// loop runs j, then the jobs handed to it while idle, until there are
// enough idle workers already or the pool is closed.
func (w *workers) loop(j job) {
	defer w.wg.Done()
	var wk *worker
	for {
		j.r.run(j.i)
		w.mu.Lock()
		if w.closed || len(w.idle) >= w.maxIdle {
			w.live--
			w.mu.Unlock()
			return
		}
		if wk == nil {
			wk = &worker{jobs: make(chan job, 1)}
		}
		w.idle = append(w.idle, wk)
		w.mu.Unlock()
		var ok bool
		if j, ok = <-wk.jobs; !ok {
			w.mu.Lock()
			w.live--
			w.mu.Unlock()
			return
		}
	}
}

// close ends the idle workers and waits for every worker to end. Requests
// still running finish first; none may start afterwards.
func (w *workers) close() {
	w.mu.Lock()
	w.closed = true
	for _, wk := range w.idle {
		close(wk.jobs)
	}
	w.idle = nil
	w.mu.Unlock()
	w.wg.Wait()
}
