package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// percentile is the nearest-rank percentile of sorted latencies (q in 0..1).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	idx := int(math.Ceil(q*float64(len(sorted)))) - 1
	if idx < 0 {
		idx = 0
	}
	if idx >= len(sorted) {
		idx = len(sorted) - 1
	}
	return sorted[idx]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64)
}

// write prints one "phase metric value" line per metric; bench/run.sh parses these with awk.
func (r *result) write(out io.Writer, fetch bool) {
	line := func(metric, value string) {
		fmt.Fprintf(out, "%-8s %-26s %s\n", r.name, metric, value)
	}
	sort.Slice(r.latencies, func(i, j int) bool { return r.latencies[i] < r.latencies[j] })
	secs := r.elapsed.Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(r.requests()) / secs
	}
	if !r.started.IsZero() {
		line("started", r.started.Format("15:04:05.000"))
	}
	line("requests", strconv.FormatUint(r.requests(), 10))
	line("req/s", strconv.FormatFloat(rate, 'f', 1, 64))
	line("p50_ms", ms(percentile(r.latencies, 0.50)))
	line("p90_ms", ms(percentile(r.latencies, 0.90)))
	line("p99_ms", ms(percentile(r.latencies, 0.99)))
	var maxLatency time.Duration
	if n := len(r.latencies); n > 0 {
		maxLatency = r.latencies[n-1]
	}
	line("max_ms", ms(maxLatency))
	line("errors", strconv.FormatUint(r.errorCount(), 10))
	keys := make([]string, 0, len(r.errors))
	for k := range r.errors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		line("errors."+k, strconv.FormatUint(r.errors[k], 10))
	}
	if fetch {
		perResp := uint64(0)
		if n := uint64(len(r.latencies)); n > 0 {
			perResp = r.bodyBytes / n
		}
		line("bytes/resp", strconv.FormatUint(perResp, 10))
		line("MB/s", strconv.FormatFloat(float64(r.bodyBytes)/1e6/math.Max(secs, 1e-9), 'f', 1, 64))
	}
	line("connections_opened", strconv.FormatUint(r.connsOpened, 10))
	if secs > 0 {
		line("client_cpu_cores", strconv.FormatFloat(r.clientCPU.Seconds()/secs, 'f', 2, 64))
		if r.serverCPU >= 0 {
			line("server_cpu_cores", strconv.FormatFloat(r.serverCPU.Seconds()/secs, 'f', 2, 64))
		}
	}
	for _, e := range slowEpisodes(r.slow, time.Second, maxEpisodes) {
		line("slow_episode", e.String())
	}
	for _, note := range r.notes {
		metric, value, _ := strings.Cut(note, " ")
		line(metric, value)
	}
}

// clientCPU is the user+system CPU this process has used so far.
func clientCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; 100 on every mainstream Linux build.
const clockTicks = 100

// serverCPU sums user+system CPU of the given processes (all their threads) from /proc, or -1
// when none of them can be read (not Linux, or the process is gone).
func serverCPU(pids []int) time.Duration {
	var total time.Duration
	found := false
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The command name (field 2) may hold spaces: fields are counted after its closing ')'.
		s := string(data)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 13 {
			continue
		}
		utime, err1 := strconv.ParseInt(fields[11], 10, 64)
		stime, err2 := strconv.ParseInt(fields[12], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		found = true
		total += time.Duration(utime+stime) * time.Second / clockTicks
	}
	if !found {
		return -1
	}
	return total
}

// maxEpisodes bounds the slow_episode lines of one phase (the longest-lasting are not chosen: the
// first ones are, in time order; a phase with more has a problem that shows anyway).
const maxEpisodes = 20

// episode is a run of slow requests whose starts are less than a gap apart: one stall, as a
// client saw it. Its wall-clock start lines it up with the server's log.
type episode struct {
	first, last time.Time
	count       int
	worst       time.Duration
}

func (e episode) String() string {
	return fmt.Sprintf("%s+%sms,n=%d,max_ms=%s",
		e.first.Format("15:04:05.000"), strconv.FormatInt(e.last.Sub(e.first).Milliseconds(), 10), e.count, ms(e.worst))
}

// slowEpisodes groups slow requests (any order) into episodes, in time order, at most limit.
func slowEpisodes(slow []slowRequest, gap time.Duration, limit int) []episode {
	sorted := append([]slowRequest(nil), slow...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].at.Before(sorted[j].at) })
	var out []episode
	for _, s := range sorted {
		if n := len(out); n > 0 && s.at.Sub(out[n-1].last) < gap {
			e := &out[n-1]
			e.last, e.count = s.at, e.count+1
			if s.latency > e.worst {
				e.worst = s.latency
			}
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, episode{first: s.at, last: s.at, count: 1, worst: s.latency})
	}
	return out
}
