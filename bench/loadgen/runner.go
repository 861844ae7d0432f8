package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// workload describes one phase: how to build request number k and which status means success.
type workload struct {
	name   string
	expect int
	build  func(k uint64) (*http.Request, error)
	// inspect, when set, sees the first successful response body of the phase (read in full), after
	// the phase has ended: decoding a 10,000-instance payload is ~0.1 s of CPU, which, done while the
	// phase ran, took a core from the server under test at its start (the machine is shared).
	inspect func(resp *http.Response, body []byte)
}

// plan bounds a phase in time and in count. Requests started before warmup has elapsed are sent
// but not recorded; no request starts after warmup+duration or beyond maxRequests.
type plan struct {
	// tls configures https requests; newConn opens a new connection for every request.
	tls         *tls.Config
	newConn     bool
	concurrency int
	warmup      time.Duration
	duration    time.Duration
	maxRequests uint64
	// rate > 0 paces the whole phase at that many requests/s (open loop); latency is then measured
	// from each request's scheduled start, so a server that falls behind shows it (no coordinated
	// omission). rate == 0 sends as fast as the connections allow (closed loop).
	rate    float64
	timeout time.Duration
	// Requests at least this slow are kept with their start time, for slowEpisodes (0: none kept).
	slow time.Duration
}

// slowRequest is one recorded request at least plan.slow long, by its (scheduled) start.
type slowRequest struct {
	at      time.Time
	latency time.Duration
}

// result is what one phase measured (only the recorded window, after warm-up).
type result struct {
	name        string
	latencies   []time.Duration // requests that got an HTTP response, any status
	ok          uint64
	errors      map[string]uint64 // "http_404", "timeout", "conn_refused", ...
	bodyBytes   uint64            // bytes of response bodies as received (compressed if gzip)
	elapsed     time.Duration
	connsOpened uint64 // TCP connections dialled during the whole phase, warm-up included
	clientCPU   time.Duration
	serverCPU   time.Duration // -1 when no server pid was given
	notes       []string      // extra "metric value" lines (payload inspection)
	slow        []slowRequest
	started     time.Time // when the phase began (its warm-up included), to line it up with a server's log
}

func (r *result) requests() uint64 { return uint64(len(r.latencies)) + r.transportErrors() }

func (r *result) transportErrors() uint64 {
	var n uint64
	for k, v := range r.errors {
		if len(k) < 5 || k[:5] != "http_" {
			n += v
		}
	}
	return n
}

func (r *result) errorCount() uint64 {
	var n uint64
	for _, v := range r.errors {
		n += v
	}
	return n
}

type workerStats struct {
	slow      []slowRequest
	latencies []time.Duration
	ok        uint64
	errors    map[string]uint64
	bodyBytes uint64
	lastDone  time.Time
}

func newClient(timeout time.Duration, dials *atomic.Uint64, tlsConfig *tls.Config, newConn bool) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
		// One persistent connection per worker, as one Eureka client holds one to its server.
		MaxIdleConns:        1,
		MaxIdleConnsPerHost: 1,
		MaxConnsPerHost:     1,
		IdleConnTimeout:     90 * time.Second,
		// Send Accept-Encoding ourselves and keep the body compressed: we measure wire bytes and
		// do not want to spend client CPU inflating every full registry.
		DisableCompression: true,
		ForceAttemptHTTP2:  false,
		TLSClientConfig:    tlsConfig,
		DisableKeepAlives:  newConn,
	}
	return &http.Client{
		Transport: transport,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// run drives one phase and returns its measurements. ctx cancellation (Ctrl-C) ends it early.
func run(ctx context.Context, w workload, p plan, serverPIDs []int) *result {
	var (
		next      atomic.Uint64
		dials     atomic.Uint64
		inspected atomic.Bool
		first     keptResponse
		wg        sync.WaitGroup
	)
	stats := make([]*workerStats, p.concurrency)
	start := time.Now()
	measureFrom := start.Add(p.warmup)
	stopAt := measureFrom.Add(p.duration)

	cpu0 := clientCPU()
	var srv0 time.Duration = -1
	var srvAtMeasure atomic.Int64
	srvAtMeasure.Store(-1)
	if len(serverPIDs) > 0 {
		srv0 = serverCPU(serverPIDs)
	}
	// Sample CPU counters at the end of the warm-up, so CPU figures cover the recorded window.
	cpuAtMeasure := cpu0
	var cpuMu sync.Mutex
	if p.warmup > 0 {
		timer := time.AfterFunc(p.warmup, func() {
			cpuMu.Lock()
			cpuAtMeasure = clientCPU()
			cpuMu.Unlock()
			if len(serverPIDs) > 0 {
				srvAtMeasure.Store(int64(serverCPU(serverPIDs)))
			}
		})
		defer timer.Stop()
	}

	for i := 0; i < p.concurrency; i++ {
		ws := &workerStats{errors: map[string]uint64{}}
		stats[i] = ws
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := newClient(p.timeout, &dials, p.tls, p.newConn)
			defer client.CloseIdleConnections()
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= p.maxRequests {
					return
				}
				begin := time.Now()
				if p.rate > 0 {
					due := start.Add(time.Duration(float64(k) / p.rate * float64(time.Second)))
					if wait := time.Until(due); wait > 0 {
						select {
						case <-ctx.Done():
							return
						case <-time.After(wait):
						}
					}
					begin = due
				}
				if !time.Now().Before(stopAt) {
					return
				}
				status, n, err := do(ctx, client, w, k, &inspected, &first)
				done := time.Now()
				if begin.Before(measureFrom) {
					continue
				}
				ws.lastDone = done
				switch {
				case err != nil:
					if ctx.Err() != nil {
						return // interrupted: not the server's fault
					}
					ws.errors[classify(err)]++
				case status == w.expect:
					ws.ok++
					ws.bodyBytes += uint64(n)
					ws.latencies = append(ws.latencies, done.Sub(begin))
				default:
					ws.errors[fmt.Sprintf("http_%d", status)]++
					ws.bodyBytes += uint64(n)
					ws.latencies = append(ws.latencies, done.Sub(begin))
				}
				if latency := done.Sub(begin); err == nil && p.slow > 0 && latency >= p.slow {
					ws.slow = append(ws.slow, slowRequest{begin, latency})
				}
			}
		}()
	}
	wg.Wait()
	if first.resp != nil {
		w.inspect(first.resp, first.body) // the goroutine that kept it has ended (wg.Wait)
	}

	r := &result{name: w.name, errors: map[string]uint64{}, serverCPU: -1, started: start}
	last := measureFrom
	for _, ws := range stats {
		r.latencies = append(r.latencies, ws.latencies...)
		r.slow = append(r.slow, ws.slow...)
		r.ok += ws.ok
		r.bodyBytes += ws.bodyBytes
		for k, v := range ws.errors {
			r.errors[k] += v
		}
		if ws.lastDone.After(last) {
			last = ws.lastDone
		}
	}
	r.elapsed = last.Sub(measureFrom)
	r.connsOpened = dials.Load()
	cpuMu.Lock()
	r.clientCPU = clientCPU() - cpuAtMeasure
	cpuMu.Unlock()
	if len(serverPIDs) > 0 {
		base := srv0
		if p.warmup > 0 {
			if v := srvAtMeasure.Load(); v >= 0 {
				base = time.Duration(v)
			}
		}
		if now := serverCPU(serverPIDs); now >= 0 && base >= 0 {
			r.serverCPU = now - base
		}
	}
	return r
}

// keptResponse is the first successful response of a phase with its whole body, for w.inspect.
type keptResponse struct {
	resp *http.Response
	body []byte
}

// do sends one request and drains the body so the connection is reused; the first successful
// response of an inspected phase is read in full and kept in first.
func do(ctx context.Context, client *http.Client, w workload, k uint64, inspected *atomic.Bool, first *keptResponse) (int, int64, error) {
	req, err := w.build(k)
	if err != nil {
		return 0, 0, err
	}
	req = req.WithContext(ctx)
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if w.inspect != nil && resp.StatusCode == w.expect && inspected.CompareAndSwap(false, true) {
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, int64(len(body)), err
		}
		first.resp, first.body = resp, body
		return resp.StatusCode, int64(len(body)), nil
	}
	n, err := io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, n, err
}

func classify(err error) string {
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "conn_refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "conn_reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken_pipe"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	default:
		reportOnce(err)
		return "transport_other"
	}
}

var reported sync.Map

func reportOnce(err error) {
	if _, seen := reported.LoadOrStore(err.Error(), true); !seen {
		fmt.Fprintf(os.Stderr, "loadgen: transport error: %v\n", err)
	}
}
