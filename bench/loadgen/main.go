// Command loadgen drives a Eureka-compatible registry with the traffic of many Eureka clients:
// registrations, heartbeats (renews), full registry fetches and delta fetches.
//
// It prints one "phase metric value" line per metric (see bench/README.md).
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	baseURL     string
	mode        string
	n           int
	apps        int
	duration    float64
	warmup      float64
	concurrency int
	rate        float64
	timeout     float64
	maxRequests uint64
	serverPIDs  []int
	allowRemote bool
	label       string
	slowMs      float64
	caFile      string
	newConn     bool
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	o := &options{}
	var pids string
	fs.StringVar(&o.baseURL, "url", "http://127.0.0.1:8761/eureka/", "registry base URL (the serviceUrl clients use)")
	fs.StringVar(&o.mode, "mode", "all", "register | renew | full | delta | all (register, renew, full, delta in turn)")
	fs.IntVar(&o.n, "n", 10000, "number of instances")
	fs.IntVar(&o.apps, "apps", 100, "number of applications the instances are spread over")
	fs.Float64Var(&o.duration, "duration", 15, "measured seconds of each timed phase (renew, full, delta)")
	fs.Float64Var(&o.warmup, "warmup", 3, "seconds of unrecorded load before each timed phase")
	fs.IntVar(&o.concurrency, "c", 16, "concurrent connections (one request in flight on each)")
	fs.Float64Var(&o.rate, "rate", 0, "pace timed phases at this many requests/s in total (0 = as fast as possible)")
	fs.Float64Var(&o.timeout, "timeout", 10, "per-request timeout in seconds")
	fs.Uint64Var(&o.maxRequests, "max-requests", 5_000_000, "upper bound on requests in one phase")
	fs.StringVar(&pids, "server-pid", "", "comma-separated pids of the server processes, to report their CPU use")
	fs.BoolVar(&o.allowRemote, "allow-remote", false, "allow a base URL that is not on the loopback interface")
	fs.Float64Var(&o.slowMs, "slow-ms", 50, "report when requests at least this slow happened (slow_episode lines; 0 = off)")
	fs.StringVar(&o.caFile, "ca-file", "", "PEM bundle that an https -url's certificate must chain to (empty: the system's roots)")
	fs.BoolVar(&o.newConn, "new-conn", false, "a new connection for every request (over https: a full handshake each, no session resumption)")
	fs.StringVar(&o.label, "label", "", "name printed for the phase instead of the mode (not with -mode all)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch o.mode {
	case "register", "renew", "full", "delta", "all":
	default:
		return nil, fmt.Errorf("-mode must be register, renew, full, delta or all, not %q", o.mode)
	}
	switch {
	case o.n < 1 || o.n > 1_000_000:
		return nil, errors.New("-n must be in 1..1000000")
	case o.apps < 1 || o.apps > o.n:
		return nil, errors.New("-apps must be in 1..n")
	case o.duration <= 0 || o.duration > 3600:
		return nil, errors.New("-duration must be in (0, 3600] seconds")
	case o.warmup < 0 || o.warmup > 600:
		return nil, errors.New("-warmup must be in [0, 600] seconds")
	case o.concurrency < 1 || o.concurrency > 4096:
		return nil, errors.New("-c must be in 1..4096")
	case o.slowMs < 0:
		return nil, errors.New("-slow-ms must be >= 0")
	case o.rate < 0:
		return nil, errors.New("-rate must be >= 0")
	case o.timeout <= 0:
		return nil, errors.New("-timeout must be > 0")
	case o.maxRequests < 1:
		return nil, errors.New("-max-requests must be >= 1")
	}
	if o.label != "" && (o.mode == "all" || strings.ContainsAny(o.label, " \t\n")) {
		return nil, errors.New("-label needs a single mode and must not contain blanks")
	}
	if !strings.HasSuffix(o.baseURL, "/") {
		o.baseURL += "/"
	}
	u, err := url.Parse(o.baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-url %q is not an http(s) URL", o.baseURL)
	}
	if !o.allowRemote && !isLoopback(u.Hostname()) {
		return nil, fmt.Errorf("-url host %q is not a loopback address (pass -allow-remote to load another machine)", u.Hostname())
	}
	for _, p := range strings.Split(pids, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		pid, err := strconv.Atoi(p)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("-server-pid: %q is not a pid", p)
		}
		o.serverPIDs = append(o.serverPIDs, pid)
	}
	return o, nil
}

// clientTLS is the TLS configuration of https requests: the roots of caFile (or the system's), and no
// session cache, so that every new connection is a full handshake.
func clientTLS(caFile string) (*tls.Config, error) {
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return config, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("-ca-file %s holds no PEM certificate", caFile)
	}
	config.RootCAs = pool
	return config, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// clientHeaders are the headers every Netflix Java client sends (protocol reference 1.4).
func clientHeaders() http.Header {
	return http.Header{
		"Accept":                    {"application/json"},
		"Accept-Encoding":           {"gzip"},
		"Discoveryidentity-Name":    {"DefaultClient"},
		"Discoveryidentity-Version": {"1.4"},
	}
}

func registerWorkload(base string, instances []instance) workload {
	header := clientHeaders()
	header.Set("Content-Type", "application/json")
	return workload{
		name:   "register",
		expect: http.StatusNoContent,
		build: func(k uint64) (*http.Request, error) {
			in := instances[k%uint64(len(instances))]
			req, err := http.NewRequest(http.MethodPost, base+"apps/"+in.App, bytes.NewReader(in.registrationBody()))
			if err != nil {
				return nil, err
			}
			req.Header = header
			return req, nil
		},
	}
}

func renewWorkload(base string, instances []instance) (workload, error) {
	// URLs are parsed once up front: per request the client only builds a small struct.
	urls := make([]*url.URL, len(instances))
	for i, in := range instances {
		u, err := url.Parse(fmt.Sprintf("%sapps/%s/%s?status=UP&lastDirtyTimestamp=%d",
			base, in.App, url.PathEscape(in.ID), in.Dirty))
		if err != nil {
			return workload{}, err
		}
		urls[i] = u
	}
	header := clientHeaders()
	return workload{
		name:   "renew",
		expect: http.StatusOK,
		build: func(k uint64) (*http.Request, error) {
			u := urls[k%uint64(len(urls))]
			return &http.Request{Method: http.MethodPut, URL: u, Host: u.Host, Header: header}, nil
		},
	}, nil
}

func fetchWorkload(name, target string, notes *[]string) (workload, error) {
	u, err := url.Parse(target)
	if err != nil {
		return workload{}, err
	}
	header := clientHeaders()
	return workload{
		name:   name,
		expect: http.StatusOK,
		build: func(uint64) (*http.Request, error) {
			return &http.Request{Method: http.MethodGet, URL: u, Host: u.Host, Header: header}, nil
		},
		inspect: func(resp *http.Response, body []byte) {
			*notes = append(*notes, inspectApplications(resp, body)...)
		},
	}, nil
}

// inspectApplications checks one fetch response (once per phase) and describes its payload.
func inspectApplications(resp *http.Response, body []byte) []string {
	encoding := resp.Header.Get("Content-Encoding")
	if encoding == "" {
		encoding = "identity"
	}
	notes := []string{"content_encoding " + encoding}
	raw := body
	if encoding == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err == nil {
			raw, err = io.ReadAll(zr)
		}
		if err != nil {
			return append(notes, "payload_error gunzip:"+strings.ReplaceAll(err.Error(), " ", "_"))
		}
	}
	var doc struct {
		Applications struct {
			Version     string `json:"versions__delta"`
			Application []struct {
				Instance []json.RawMessage `json:"instance"`
			} `json:"application"`
		} `json:"applications"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return append(notes, "payload_error json:"+strings.ReplaceAll(err.Error(), " ", "_"))
	}
	count := 0
	for _, app := range doc.Applications.Application {
		count += len(app.Instance)
	}
	return append(notes,
		"payload_bytes_uncompressed "+strconv.Itoa(len(raw)),
		"payload_apps "+strconv.Itoa(len(doc.Applications.Application)),
		"payload_instances "+strconv.Itoa(count),
		"payload_versions_delta "+doc.Applications.Version,
	)
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runPhases(ctx, o, os.Stdout))
}

func runPhases(ctx context.Context, o *options, out io.Writer) int {
	instances := buildInstances(o.n, o.apps)
	phases := []string{o.mode}
	if o.mode == "all" {
		phases = []string{"register", "renew", "full", "delta"}
	}
	fmt.Fprintf(out, "# loadgen url=%s n=%d apps=%d c=%d duration=%gs warmup=%gs rate=%g\n",
		o.baseURL, o.n, o.apps, o.concurrency, o.duration, o.warmup, o.rate)
	tlsConfig, err := clientTLS(o.caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		return 2
	}
	timed := plan{
		tls:         tlsConfig,
		newConn:     o.newConn,
		concurrency: o.concurrency,
		warmup:      seconds(o.warmup),
		duration:    seconds(o.duration),
		maxRequests: o.maxRequests,
		rate:        o.rate,
		timeout:     seconds(o.timeout),
		slow:        time.Duration(o.slowMs * float64(time.Millisecond)),
	}
	status := 0
	for _, phase := range phases {
		if ctx.Err() != nil {
			return 130
		}
		var (
			w     workload
			p     = timed
			notes []string
			err   error
		)
		switch phase {
		case "register":
			w = registerWorkload(o.baseURL, instances)
			// Exactly one registration per instance, as fast as the connections allow; bounded in time too.
			p.warmup, p.rate, p.duration, p.newConn = 0, 0, 10*time.Minute, false
			p.maxRequests = uint64(o.n)
		case "renew":
			w, err = renewWorkload(o.baseURL, instances)
		case "full":
			w, err = fetchWorkload("full", o.baseURL+"apps/", &notes)
		case "delta":
			w, err = fetchWorkload("delta", o.baseURL+"apps/delta", &notes)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			return 2
		}
		if o.label != "" {
			w.name = o.label
		}
		r := run(ctx, w, p, o.serverPIDs)
		r.notes = notes
		r.write(out, phase == "full" || phase == "delta")
		if r.ok == 0 {
			fmt.Fprintf(os.Stderr, "loadgen: phase %s got no successful response\n", phase)
			if phase == "renew" && r.errors["http_404"] > 0 {
				fmt.Fprintln(os.Stderr, "loadgen: renews answered 404: register the same -n/-apps first (-mode register)")
			}
			status = 1
			if o.mode == "all" {
				return status
			}
		}
	}
	return status
}
