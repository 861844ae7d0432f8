package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{0.5: 50, 0.9: 90, 0.99: 99, 1: 100} {
		if got := percentile(lat, q); got != want*time.Millisecond {
			t.Errorf("p%v = %v, want %v", q*100, got, want*time.Millisecond)
		}
	}
	if got := percentile(nil, 0.99); got != 0 {
		t.Errorf("empty percentile = %v", got)
	}
}

func TestInstancesAreDeterministicAndUnique(t *testing.T) {
	a, b := buildInstances(10000, 100), buildInstances(10000, 100)
	seen := map[string]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("instance %d differs between runs", i)
		}
		if seen[a[i].ID] {
			t.Fatalf("duplicate id %s", a[i].ID)
		}
		seen[a[i].ID] = true
	}
	if a[7].App != "BENCH-SVC-007" {
		t.Errorf("app of instance 7 = %s", a[7].App)
	}
}

func TestRegistrationBodyHasTheJavaLegacyShape(t *testing.T) {
	in := newInstance(3, 100)
	body := in.registrationBody()
	var doc struct {
		Instance map[string]any `json:"instance"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	inst := doc.Instance
	if inst["app"] != in.App || inst["instanceId"] != in.ID || inst["hostName"] != in.IP {
		t.Errorf("identity fields wrong: %v", inst)
	}
	if inst["lastDirtyTimestamp"] != "1717000000003" || inst["isCoordinatingDiscoveryServer"] != "false" {
		t.Errorf("legacy codec writes these as strings: %v", inst)
	}
	port := inst["port"].(map[string]any)
	if port["@enabled"] != "true" || port["$"] != float64(in.Port) {
		t.Errorf("port = %v", port)
	}
	if !bytes.HasPrefix(body, []byte(`{"instance":{"instanceId":`)) {
		t.Errorf("keys out of Jackson order: %s", body[:40])
	}
}

func TestLoopbackGuard(t *testing.T) {
	if _, err := parseFlags([]string{"-url", "http://10.0.0.1:8761/eureka/"}); err == nil {
		t.Error("a non-loopback URL was accepted")
	}
	for _, u := range []string{"http://127.0.0.1:8761/eureka", "http://localhost:1/eureka/", "http://[::1]:8761/eureka/"} {
		o, err := parseFlags([]string{"-url", u})
		if err != nil {
			t.Errorf("%s refused: %v", u, err)
			continue
		}
		if !strings.HasSuffix(o.baseURL, "/") {
			t.Errorf("base URL %s lost its trailing slash", o.baseURL)
		}
	}
}

// A miniature registry: counts renews, answers 404 for one id, serves a gzip registry.
func TestPhasesAgainstAFakeServer(t *testing.T) {
	var mu sync.Mutex
	registered := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == http.MethodPost:
			body, _ := io.ReadAll(r.Body)
			var doc struct {
				Instance struct {
					InstanceID string `json:"instanceId"`
				} `json:"instance"`
			}
			if json.Unmarshal(body, &doc) != nil || r.Header.Get("Content-Type") != "application/json" {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			registered[doc.Instance.InstanceID] = true
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodPut:
			id := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
			if !registered[id] || r.URL.Query().Get("lastDirtyTimestamp") == "" {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.WriteHeader(http.StatusOK)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"applications":{"versions__delta":"1","apps__hashcode":"UP_2_",` +
				`"application":[{"name":"A","instance":[{},{}]}]}}`))
		}
	}))
	defer srv.Close()

	o, err := parseFlags([]string{"-url", srv.URL + "/eureka", "-n", "50", "-apps", "5",
		"-duration", "0.3", "-warmup", "0.1", "-c", "4"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := runPhases(context.Background(), o, &out); code != 0 {
		t.Fatalf("exit %d\n%s", code, out.String())
	}
	got := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] != "#" {
			got[f[0]+" "+f[1]] = f[2]
		}
	}
	for metric, want := range map[string]string{
		"register requests":      "50",
		"register errors":        "0",
		"renew errors":           "0",
		"full payload_instances": "2",
		"delta content_encoding": "identity",
	} {
		if got[metric] != want {
			t.Errorf("%s = %q, want %q:\n%s", metric, got[metric], want, out.String())
		}
	}
}

func TestSlowRequestsGroupIntoEpisodesByGap(t *testing.T) {
	base := time.Date(2026, 12, 5, 14, 12, 10, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	slow := []slowRequest{
		{at(5200), 80 * time.Millisecond},
		{at(0), 60 * time.Millisecond},
		{at(300), 270 * time.Millisecond},
		{at(900), 55 * time.Millisecond},
		{at(9000), 51 * time.Millisecond},
	}
	got := slowEpisodes(slow, time.Second, 10)
	want := []string{
		"14:12:10.000+900ms,n=3,max_ms=270.00",
		"14:12:15.200+0ms,n=1,max_ms=80.00",
		"14:12:19.000+0ms,n=1,max_ms=51.00",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d episodes %v, want %v", len(got), got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("episode %d = %s, want %s", i, got[i], want[i])
		}
	}
	if limited := slowEpisodes(slow, time.Second, 2); len(limited) != 2 || limited[1].count != 1 {
		t.Errorf("limit 2: %v", limited)
	}
	if none := slowEpisodes(nil, time.Second, 10); len(none) != 0 {
		t.Errorf("no slow request: %v", none)
	}
}

func TestHTTPSWithTheCAFileAndANewConnectionPerRequest(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, block, 0o600); err != nil {
		t.Fatal(err)
	}
	metrics := func(args ...string) (int, map[string]string) {
		o, err := parseFlags(append([]string{"-url", srv.URL + "/eureka/", "-n", "20", "-apps", "2",
			"-duration", "0.3", "-warmup", "0", "-c", "2", "-mode", "renew"}, args...))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		code := runPhases(context.Background(), o, &out)
		got := map[string]string{}
		for _, line := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] != "#" {
				got[f[1]] = f[2]
			}
		}
		return code, got
	}
	code, kept := metrics("-ca-file", caFile)
	if code != 0 || kept["errors"] != "0" || kept["connections_opened"] != "2" {
		t.Fatalf("kept-alive over https: exit %d, %v", code, kept)
	}
	code, fresh := metrics("-ca-file", caFile, "-new-conn")
	requests, _ := strconv.Atoi(fresh["requests"])
	opened, _ := strconv.Atoi(fresh["connections_opened"])
	if code != 0 || fresh["errors"] != "0" || requests < 2 || opened < requests {
		t.Fatalf("a new connection per request: exit %d, %v", code, fresh)
	}
	if code, unknown := metrics(); code == 0 || unknown["errors"] == "0" {
		t.Fatalf("a certificate of an unknown CA must fail: exit %d, %v", code, unknown)
	}
}
