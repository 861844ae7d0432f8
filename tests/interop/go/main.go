// Command fargo-interop drives the unmodified Go Eureka client github.com/hudl/fargo against a
// Eureka server and reports every client call as one JSON line on stdout.
//
// One invocation runs one scenario (or all of them) in one wire mode: XML (fargo's default) or
// JSON (fargo's UseJson flag). Each scenario registers its own instance under names derived from
// the scenario and -tag, so runs never share state; the "setup" line lists those names.
//
//	fargo-interop -url http://127.0.0.1:8761/eureka/v2 -mode xml -scenario register -tag xml
//	fargo-interop -url http://127.0.0.1:8761/eureka/v2 -mode json -scenario all
//	fargo-interop -version
//
// Line shapes (one JSON object each):
//
//	{"event":"setup","scenario":..,"mode":..,"names":{app,host,id,vip,svip,...},"fargo":"v1.4.0"}
//	{"event":"step","scenario":..,"mode":..,"step":..,"ok":bool,"error":{kind,http_status,message}|null,
//	 "expect":"ok|http:404|app_not_found","as_expected":bool,"attempts":n,"elapsed_ms":n,"result":..}
//	{"event":"end","scenario":..,"mode":..,"ok":bool}
//
// "ok" is true when the fargo call returned no error. Steps that read the server's cached views
// (GetApps, GetApp, GetInstancesByVIPAddress) are polled until their condition holds or -wait runs
// out. The exit code is 0 only when every step met its "expect" (2 for bad usage).
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/hudl/fargo"
	logging "github.com/op/go-logging"
)

const fargoModule = "github.com/hudl/fargo"

// Scenarios in the order "all" runs them.
var scenarioOrder = []string{
	"register", "heartbeat", "apps", "vip", "status", "metadata", "reregister", "deregister", "amazon",
}

var scenarios = map[string]func(*runner){
	"register":   scenarioRegister,
	"heartbeat":  scenarioHeartbeat,
	"apps":       scenarioApps,
	"vip":        scenarioVIP,
	"status":     scenarioStatus,
	"metadata":   scenarioMetadata,
	"reregister": scenarioReregister,
	"deregister": scenarioDeregister,
	"amazon":     scenarioAmazon,
}

type options struct {
	url     string
	mode    string
	tag     string
	vip     string
	peerApp string
	port    int
	wait    time.Duration
}

type errorInfo struct {
	// Kind is "http_status" (fargo reported the response code), "app_not_found" (fargo's
	// AppNotFoundError), "timeout" (a polled condition never held) or "other".
	Kind       string `json:"kind"`
	HTTPStatus int    `json:"http_status,omitempty"`
	Message    string `json:"message"`
}

type names struct {
	App   string `json:"app"`
	Host  string `json:"host"`
	ID    string `json:"id"`
	VIP   string `json:"vip"`
	SVIP  string `json:"svip"`
	Ghost string `json:"ghost"`
	Port  int    `json:"port"`
	// Second instance of the register scenario, with an explicit instanceId.
	ExplicitID string `json:"explicit_id"`
	// Names that must not exist on the server.
	UnknownApp string `json:"unknown_app"`
	UnknownVIP string `json:"unknown_vip"`
	PeerApp    string `json:"peer_app,omitempty"`
}

type instanceView struct {
	InstanceID        string                 `json:"instanceId"`
	ID                string                 `json:"id"`
	App               string                 `json:"app"`
	HostName          string                 `json:"hostName"`
	IPAddr            string                 `json:"ipAddr"`
	VipAddress        string                 `json:"vipAddress"`
	SecureVipAddress  string                 `json:"secureVipAddress"`
	Status            string                 `json:"status"`
	OverriddenStatus  string                 `json:"overriddenStatus"`
	Port              int                    `json:"port"`
	PortEnabled       bool                   `json:"portEnabled"`
	SecurePort        int                    `json:"securePort"`
	SecurePortEnabled bool                   `json:"securePortEnabled"`
	HomePageURL       string                 `json:"homePageUrl"`
	StatusPageURL     string                 `json:"statusPageUrl"`
	HealthCheckURL    string                 `json:"healthCheckUrl"`
	CountryID         int64                  `json:"countryId"`
	DataCenterName    string                 `json:"dataCenterName"`
	DataCenterClass   string                 `json:"dataCenterClass"`
	DataCenterMeta    interface{}            `json:"dataCenterMetadata"`
	LeaseInfo         fargo.LeaseInfo        `json:"leaseInfo"`
	Metadata          map[string]interface{} `json:"metadata"`
	MetadataError     string                 `json:"metadataError,omitempty"`
}

type runner struct {
	conn     *fargo.EurekaConnection
	opts     options
	scenario string
	n        names
	out      *json.Encoder
	failed   bool
}

func main() {
	var o options
	var scenario, logLevel string
	var showVersion bool
	flag.StringVar(&o.url, "url", "", "Eureka service URL, as fargo takes it (e.g. http://127.0.0.1:8761/eureka/v2)")
	flag.StringVar(&o.mode, "mode", "xml", "wire format: xml (fargo's default) or json (UseJson)")
	flag.StringVar(&scenario, "scenario", "all", "scenario to run: all, "+strings.Join(scenarioOrder, ", "))
	flag.StringVar(&o.tag, "tag", "", "suffix that makes this run's app and host names unique (default: the mode)")
	flag.StringVar(&o.vip, "vip", "", "VIP address (and secure VIP) for the scenario's instance (default: derived)")
	flag.StringVar(&o.peerApp, "peer-app", "", "apps scenario: an app registered by someone else that must be listed")
	flag.IntVar(&o.port, "port", 9090, "port the scenario's instance registers")
	flag.DurationVar(&o.wait, "wait", 10*time.Second, "bound on polling cached reads for an expected change")
	flag.StringVar(&logLevel, "log-level", "WARNING", "fargo's log level on stderr (DEBUG shows every URL)")
	flag.BoolVar(&showVersion, "version", false, "print the fargo and Go versions as JSON and exit")
	var caFile, certFile, keyFile string
	flag.StringVar(&caFile, "ca", "", "HTTPS: PEM bundle of the CAs that verify the server (default: the system's)")
	flag.StringVar(&certFile, "cert", "", "HTTPS: client certificate (PEM chain) to present, with -key")
	flag.StringVar(&keyFile, "key", "", "HTTPS: the client certificate's key (PEM)")
	flag.Parse()

	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	if showVersion {
		must(out.Encode(map[string]string{"fargo": fargoVersion(), "go": runtime.Version()}))
		return
	}
	if o.url == "" {
		usage("-url is required")
	}
	if o.mode != "xml" && o.mode != "json" {
		usage("-mode must be xml or json")
	}
	if o.tag == "" {
		o.tag = o.mode
	}
	level, err := logging.LogLevel(logLevel)
	if err != nil {
		usage("-log-level: " + err.Error())
	}
	logging.SetLevel(level, "fargo")

	var todo []string
	if scenario == "all" {
		todo = scenarioOrder
	} else if _, ok := scenarios[scenario]; ok {
		todo = []string{scenario}
	} else {
		usage("unknown -scenario " + scenario)
	}

	// fargo has no TLS settings: every call goes through its exported HttpClient, whose transport's
	// TLS configuration is the program's to set.
	if caFile != "" || certFile != "" {
		transport, ok := fargo.HttpClient.Transport.(*http.Transport)
		if !ok {
			must(errors.New("fargo.HttpClient.Transport is not an *http.Transport"))
		}
		config := &tls.Config{MinVersion: tls.VersionTLS12}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			must(err)
			config.RootCAs = x509.NewCertPool()
			if !config.RootCAs.AppendCertsFromPEM(pem) {
				must(errors.New("-ca: no certificate in " + caFile))
			}
		}
		if certFile != "" {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			must(err)
			config.Certificates = []tls.Certificate{pair}
		}
		transport.TLSClientConfig = config
	}

	conn := fargo.NewConn(o.url)
	conn.UseJson = o.mode == "json"
	failed := false
	for _, name := range todo {
		r := &runner{conn: &conn, opts: o, scenario: name, n: deriveNames(name, o), out: out}
		r.emit(map[string]interface{}{"event": "setup", "names": r.n, "fargo": fargoVersion(), "url": o.url})
		scenarios[name](r)
		r.emit(map[string]interface{}{"event": "end", "ok": !r.failed})
		failed = failed || r.failed
	}
	if failed {
		os.Exit(1)
	}
}

func usage(message string) {
	fmt.Fprintln(os.Stderr, "fargo-interop: "+message)
	flag.Usage()
	os.Exit(2)
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "fargo-interop:", err)
		os.Exit(3)
	}
}

func fargoVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range info.Deps {
		if dep.Path == fargoModule {
			if dep.Replace != nil {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	return "unknown"
}

func deriveNames(scenario string, o options) names {
	base := scenario + "-" + o.tag
	host := base + ".fargo.test"
	vip := o.vip
	if vip == "" {
		vip = "fargo-" + base
	}
	return names{
		App:        strings.ToUpper("fargo-" + base),
		Host:       host,
		ID:         host, // fargo leaves instanceId empty: the server falls back to the hostName
		VIP:        vip,
		SVIP:       vip,
		Ghost:      "ghost-" + host,
		Port:       o.port,
		ExplicitID: fmt.Sprintf("%s:%s:%d", host, strings.ToLower("fargo-"+base), o.port+1),
		UnknownApp: strings.ToUpper("fargo-no-such-app-" + base),
		UnknownVIP: "fargo-no-such-vip-" + base,
		PeerApp:    o.peerApp,
	}
}

// ----------------------------------------------------------------------------- reporting

func (r *runner) emit(line map[string]interface{}) {
	line["scenario"] = r.scenario
	line["mode"] = r.opts.mode
	must(r.out.Encode(line))
}

func classify(err error) *errorInfo {
	if err == nil {
		return nil
	}
	if code, ok := fargo.HTTPResponseStatusCode(err); ok {
		return &errorInfo{Kind: "http_status", HTTPStatus: code, Message: err.Error()}
	}
	var notFound fargo.AppNotFoundError
	if errors.As(err, &notFound) {
		return &errorInfo{Kind: "app_not_found", Message: err.Error()}
	}
	return &errorInfo{Kind: "other", Message: err.Error()}
}

func meets(expect string, info *errorInfo) bool {
	switch {
	case expect == "ok":
		return info == nil
	case expect == "app_not_found":
		return info != nil && info.Kind == "app_not_found"
	case strings.HasPrefix(expect, "http:"):
		return info != nil && info.Kind == "http_status" && fmt.Sprint(info.HTTPStatus) == expect[len("http:"):]
	}
	return false
}

func (r *runner) report(step, expect string, started time.Time, attempts int, info *errorInfo, result interface{}) bool {
	asExpected := meets(expect, info)
	if !asExpected {
		r.failed = true
	}
	r.emit(map[string]interface{}{
		"event":       "step",
		"step":        step,
		"ok":          info == nil,
		"error":       info,
		"expect":      expect,
		"as_expected": asExpected,
		"attempts":    attempts,
		"elapsed_ms":  time.Since(started).Milliseconds(),
		"result":      result,
	})
	return asExpected
}

// call runs one fargo call once and reports it.
func (r *runner) call(step, expect string, fn func() (interface{}, error)) bool {
	started := time.Now()
	result, err := fn()
	return r.report(step, expect, started, 1, classify(err), result)
}

// poll repeats a read of a cached view until done(result, err) holds or -wait runs out; the last
// outcome is reported, as a "timeout" error when the condition never held.
func (r *runner) poll(step, expect string, fn func() (interface{}, error), done func(interface{}, error) bool) bool {
	started := time.Now()
	deadline := started.Add(r.opts.wait)
	attempts := 0
	for {
		attempts++
		result, err := fn()
		if done(result, err) {
			return r.report(step, expect, started, attempts, classify(err), result)
		}
		if time.Now().After(deadline) {
			info := classify(err)
			last := "no error"
			if info != nil {
				last = info.Kind + ": " + info.Message
			}
			timeout := &errorInfo{
				Kind:    "timeout",
				Message: fmt.Sprintf("condition not met after %d attempts in %s (last call: %s)", attempts, r.opts.wait, last),
			}
			if info != nil && info.Kind == "http_status" {
				timeout.HTTPStatus = info.HTTPStatus
			}
			return r.report(step, expect, started, attempts, timeout, result)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func view(ins *fargo.Instance) *instanceView {
	if ins == nil {
		return nil
	}
	v := &instanceView{
		InstanceID:        ins.InstanceId,
		ID:                ins.Id(),
		App:               ins.App,
		HostName:          ins.HostName,
		IPAddr:            ins.IPAddr,
		VipAddress:        ins.VipAddress,
		SecureVipAddress:  ins.SecureVipAddress,
		Status:            string(ins.Status),
		OverriddenStatus:  string(ins.Overriddenstatus),
		Port:              ins.Port,
		PortEnabled:       ins.PortEnabled,
		SecurePort:        ins.SecurePort,
		SecurePortEnabled: ins.SecurePortEnabled,
		HomePageURL:       ins.HomePageUrl,
		StatusPageURL:     ins.StatusPageUrl,
		HealthCheckURL:    ins.HealthCheckUrl,
		CountryID:         ins.CountryId,
		DataCenterName:    ins.DataCenterInfo.Name,
		DataCenterClass:   ins.DataCenterInfo.Class,
		LeaseInfo:         ins.LeaseInfo,
	}
	if ins.DataCenterInfo.Name == fargo.Amazon {
		v.DataCenterMeta = ins.DataCenterInfo.Metadata
	} else {
		v.DataCenterMeta = ins.DataCenterInfo.AlternateMetadata
	}
	// A locally built instance holds SetMetadataString's values, parsed. One read from the server
	// holds raw XML or JSON (GetInstance and the read-back of ReregisterInstance do not parse it).
	// Parse a copy: parsing the instance itself would change what fargo sends when it is registered
	// again (its XML marshaller writes only parsed metadata), and the report must not alter the client.
	v.Metadata = ins.Metadata.GetMap()
	if len(ins.Metadata.Raw) > 0 {
		dup := *ins
		dup.Metadata = fargo.InstanceMetadata{Raw: append([]byte(nil), ins.Metadata.Raw...)}
		app := fargo.Application{Instances: []*fargo.Instance{&dup}}
		if err := app.ParseAllMetadata(); err != nil {
			v.MetadataError = err.Error()
		}
		v.Metadata = dup.Metadata.GetMap()
	}
	if v.Metadata == nil {
		v.Metadata = map[string]interface{}{}
	}
	return v
}

func views(instances []*fargo.Instance) []*instanceView {
	out := make([]*instanceView, 0, len(instances))
	for _, ins := range instances {
		out = append(out, view(ins))
	}
	return out
}

func ids(instances []*fargo.Instance) []string {
	out := make([]string, 0, len(instances))
	for _, ins := range instances {
		out = append(out, ins.Id())
	}
	sort.Strings(out)
	return out
}

func hasID(instances []*fargo.Instance, id string) bool {
	for _, ins := range instances {
		if ins.Id() == id {
			return true
		}
	}
	return false
}

func findID(instances []*fargo.Instance, id string) *fargo.Instance {
	for _, ins := range instances {
		if ins.Id() == id {
			return ins
		}
	}
	return nil
}

// --------------------------------------------------------------------------- fargo calls

// newInstance is what a fargo application typically registers: no instanceId (the hostName is the
// id), zero lease settings (the server's defaults apply) and one metadata entry.
func (r *runner) newInstance() *fargo.Instance {
	n := r.n
	base := fmt.Sprintf("http://%s:%d", n.Host, n.Port)
	ins := &fargo.Instance{
		HostName:          n.Host,
		App:               n.App,
		IPAddr:            "127.0.0.1",
		VipAddress:        n.VIP,
		SecureVipAddress:  n.SVIP,
		Status:            fargo.UP,
		Port:              n.Port,
		PortEnabled:       true,
		SecurePort:        n.Port + 443,
		SecurePortEnabled: false,
		HomePageUrl:       base + "/",
		StatusPageUrl:     base + "/info",
		HealthCheckUrl:    base + "/health",
		DataCenterInfo:    fargo.DataCenterInfo{Name: fargo.MyOwn},
	}
	ins.SetMetadataString("registered.by", "fargo-interop")
	return ins
}

func (r *runner) ghost() *fargo.Instance {
	ins := r.newInstance()
	ins.HostName = r.n.Ghost
	return ins
}

func (r *runner) getInstance(step, expect, id string) *fargo.Instance {
	var got *fargo.Instance
	r.call(step, expect, func() (interface{}, error) {
		ins, err := r.conn.GetInstance(r.n.App, id)
		got = ins
		if err != nil {
			return nil, err
		}
		return view(ins), nil
	})
	return got
}

func (r *runner) register(step string, ins *fargo.Instance) bool {
	return r.call(step, "ok", func() (interface{}, error) {
		err := r.conn.ReregisterInstance(ins)
		return view(ins), err
	})
}

func (r *runner) heartbeat(step, expect string, ins *fargo.Instance) bool {
	return r.call(step, expect, func() (interface{}, error) { return nil, r.conn.HeartBeatInstance(ins) })
}

func (r *runner) updateStatus(step, expect string, ins *fargo.Instance, status fargo.StatusType) bool {
	return r.call(step, expect, func() (interface{}, error) {
		return map[string]string{"value": string(status)}, r.conn.UpdateInstanceStatus(ins, status)
	})
}

// pollAppUntil reads GetApp(name) until until(instances, err) holds; it returns the last instances.
func (r *runner) pollAppUntil(step, expect, name string, until func([]*fargo.Instance, error) bool) []*fargo.Instance {
	var last []*fargo.Instance
	var lastErr error
	r.poll(step, expect, func() (interface{}, error) {
		app, err := r.conn.GetApp(name)
		last, lastErr = nil, err
		if err != nil {
			return nil, err
		}
		last = app.Instances
		return map[string]interface{}{"name": app.Name, "instances": views(app.Instances)}, nil
	}, func(interface{}, error) bool {
		return until(last, lastErr)
	})
	return last
}

func (r *runner) pollVIP(step, vip string, secure bool, until func([]*fargo.Instance) bool, opts ...fargo.InstanceQueryOption) []*fargo.Instance {
	var last []*fargo.Instance
	r.poll(step, "ok", func() (interface{}, error) {
		instances, err := r.conn.GetInstancesByVIPAddress(vip, secure, opts...)
		last = instances
		if err != nil {
			return nil, err
		}
		return map[string]interface{}{
			"vip": vip, "secure": secure, "ids": ids(instances), "nil": instances == nil, "instances": views(instances),
		}, nil
	}, func(_ interface{}, err error) bool {
		return err == nil && until(last)
	})
	return last
}

// ------------------------------------------------------------------------------ scenarios

// register: GET-then-POST registration (RegisterInstance), its no-op repeat, the read-back, and a
// second instance with an explicit instanceId containing colons.
func scenarioRegister(r *runner) {
	r.getInstance("get_instance_before", "http:404", r.n.ID)
	ins := r.newInstance()
	if !r.call("register", "ok", func() (interface{}, error) {
		err := r.conn.RegisterInstance(ins)
		return view(ins), err
	}) {
		return
	}
	// Already registered: fargo's GET answers 200, so it must not POST again.
	r.call("register_again", "ok", func() (interface{}, error) {
		err := r.conn.RegisterInstance(ins)
		return view(ins), err
	})
	r.getInstance("get_instance", "ok", r.n.ID)

	// A second instance with an explicit instanceId (colons, as Spring's host:app:port) and no metadata.
	explicit := r.newInstance()
	explicit.InstanceId = r.n.ExplicitID
	explicit.Port = r.n.Port + 1
	explicit.Metadata = fargo.InstanceMetadata{}
	r.call("register_with_instance_id", "ok", func() (interface{}, error) {
		err := r.conn.RegisterInstance(explicit)
		return view(explicit), err
	})
	r.getInstance("get_instance_with_instance_id", "ok", r.n.ExplicitID)
	listed := r.pollAppUntil("get_app", "ok", r.n.App, func(instances []*fargo.Instance, err error) bool {
		return err == nil && hasID(instances, r.n.ID) && hasID(instances, r.n.ExplicitID)
	})
	// fargo's own "Read empty instance metadata" check: a missing key of empty metadata is no error.
	r.call("read_empty_metadata", "ok", func() (interface{}, error) {
		found := findID(listed, r.n.ExplicitID)
		if found == nil {
			return nil, errors.New("GetApp did not list the instance with the explicit instanceId")
		}
		value, err := found.Metadata.GetString("SomeProp")
		return map[string]interface{}{"value": value, "map": found.Metadata.GetMap()}, err
	})
}

// heartbeat: a heartbeat for an unknown instance is a 404 error fargo lets the caller classify;
// once registered, heartbeats succeed and renew the lease.
func scenarioHeartbeat(r *runner) {
	ins := r.newInstance()
	r.heartbeat("heartbeat_unknown", "http:404", ins)
	if !r.register("register", ins) {
		return
	}
	for i := 1; i <= 3; i++ {
		time.Sleep(20 * time.Millisecond)
		r.heartbeat(fmt.Sprintf("heartbeat_%d", i), "ok", ins)
	}
	r.getInstance("get_instance", "ok", r.n.ID)
	// The server forgets the instance (here: fargo deregisters it). The next heartbeat is a 404, and
	// the application's usual recovery is to re-register and carry on (fargo's own tests do this).
	r.call("forget", "ok", func() (interface{}, error) { return nil, r.conn.DeregisterInstance(ins) })
	r.heartbeat("heartbeat_forgotten", "http:404", ins)
	r.register("reregister_after_404", ins)
	r.heartbeat("heartbeat_recovered", "ok", ins)
}

// apps: GetApps and GetApp (own app, another client's app, a lower-case name, an unknown app).
func scenarioApps(r *runner) {
	ins := r.newInstance()
	if !r.register("register", ins) {
		return
	}
	var listed map[string]*fargo.Application
	r.poll("get_apps", "ok", func() (interface{}, error) {
		apps, err := r.conn.GetApps()
		listed = apps
		if err != nil {
			return nil, err
		}
		summary := map[string][]string{}
		for name, app := range apps {
			summary[name] = ids(app.Instances)
		}
		return map[string]interface{}{"apps": summary}, nil
	}, func(_ interface{}, err error) bool {
		if err != nil || listed == nil || listed[r.n.App] == nil || !hasID(listed[r.n.App].Instances, r.n.ID) {
			return false
		}
		return r.n.PeerApp == "" || listed[r.n.PeerApp] != nil
	})
	r.pollAppUntil("get_app", "ok", r.n.App, func(instances []*fargo.Instance, err error) bool {
		return err == nil && hasID(instances, r.n.ID)
	})
	if r.n.PeerApp != "" {
		r.pollAppUntil("get_app_peer", "ok", r.n.PeerApp, func(instances []*fargo.Instance, err error) bool {
			return err == nil && len(instances) > 0
		})
	}
	r.call("get_app_lowercase", "ok", func() (interface{}, error) {
		app, err := r.conn.GetApp(strings.ToLower(r.n.App))
		if err != nil {
			return nil, err
		}
		return map[string]interface{}{"name": app.Name, "ids": ids(app.Instances)}, nil
	})
	r.call("get_app_unknown", "app_not_found", func() (interface{}, error) {
		app, err := r.conn.GetApp(r.n.UnknownApp)
		if err != nil {
			return nil, err
		}
		return map[string]interface{}{"name": app.Name, "ids": ids(app.Instances)}, nil
	})
}

// vip: GetInstancesByVIPAddress, plain and secure, with and without status filters; a VIP that
// matches nothing is an empty list, not an error.
func scenarioVIP(r *runner) {
	ins := r.newInstance()
	if !r.register("register", ins) {
		return
	}
	r.pollVIP("vip", r.n.VIP, false, func(found []*fargo.Instance) bool { return hasID(found, r.n.ID) })
	r.pollVIP("svip", r.n.SVIP, true, func(found []*fargo.Instance) bool { return hasID(found, r.n.ID) })
	r.pollVIP("vip_up", r.n.VIP, false, func(found []*fargo.Instance) bool { return hasID(found, r.n.ID) }, fargo.ThatAreUp)
	r.pollVIP("vip_unknown", r.n.UnknownVIP, false, func([]*fargo.Instance) bool { return true })
	r.pollVIP("svip_unknown", r.n.UnknownVIP, true, func([]*fargo.Instance) bool { return true })
	r.updateStatus("status_out_of_service", "ok", ins, fargo.OUTOFSERVICE)
	r.pollVIP("vip_out_of_service", r.n.VIP, false, func(found []*fargo.Instance) bool {
		return hasID(found, r.n.ID)
	}, fargo.WithStatus(fargo.OUTOFSERVICE))
	r.pollVIP("vip_up_after_override", r.n.VIP, false, func(found []*fargo.Instance) bool {
		return !hasID(found, r.n.ID)
	}, fargo.ThatAreUp)
}

// status: UpdateInstanceStatus overrides (no lastDirtyTimestamp), surviving heartbeats; the last
// override (OUT_OF_SERVICE) is left in place for the test to check on the server.
func scenarioStatus(r *runner) {
	ins := r.newInstance()
	if !r.register("register", ins) {
		return
	}
	r.updateStatus("status_unknown_instance", "http:404", r.ghost(), fargo.OUTOFSERVICE)
	r.updateStatus("status_out_of_service", "ok", ins, fargo.OUTOFSERVICE)
	r.getInstance("get_instance_out_of_service", "ok", r.n.ID)
	r.heartbeat("heartbeat", "ok", ins)
	r.getInstance("get_instance_after_heartbeat", "ok", r.n.ID)
	r.updateStatus("status_up", "ok", ins, fargo.UP)
	r.getInstance("get_instance_up", "ok", r.n.ID)
	r.updateStatus("status_final", "ok", ins, fargo.OUTOFSERVICE)
	r.pollAppUntil("get_app", "ok", r.n.App, func(instances []*fargo.Instance, err error) bool {
		found := findID(instances, r.n.ID)
		return err == nil && found != nil && found.Status == fargo.OUTOFSERVICE
	})
}

// metadataHas reads a metadata value as fargo's GetString does. In XML mode fargo parses metadata with
// mxj, which recasts values that look like numbers or booleans, so the scenarios use none.
func metadataHas(ins *fargo.Instance, key, value string) bool {
	if ins == nil {
		return false
	}
	got, err := ins.Metadata.GetString(key)
	return err == nil && got == value
}

// metadata: AddMetadataString merges keys into the server's copy.
func scenarioMetadata(r *runner) {
	ins := r.newInstance()
	if !r.register("register", ins) {
		return
	}
	add := func(step, expect string, target *fargo.Instance, key, value string) {
		r.call(step, expect, func() (interface{}, error) {
			return map[string]string{key: value}, r.conn.AddMetadataString(target, key, value)
		})
	}
	add("add_metadata", "ok", ins, "color", "deep blue & green")
	add("add_metadata_dotted", "ok", ins, "zone.name", "eu-west-1a")
	add("add_metadata_underscore", "ok", ins, "build_id", "abc-def")
	add("add_metadata_unknown_instance", "http:404", r.ghost(), "color", "red")
	r.getInstance("get_instance", "ok", r.n.ID)
	r.pollAppUntil("get_app", "ok", r.n.App, func(instances []*fargo.Instance, err error) bool {
		return err == nil && metadataHas(findID(instances, r.n.ID), "zone.name", "eu-west-1a")
	})
}

// reregister: ReregisterInstance POSTs again, first what fargo read back after registering (the
// server's own copy), then a changed port. A second instance without metadata is re-registered from
// its read-back too: in JSON mode fargo then echoes the server's {"@class":"...EmptyMap"} marker.
func scenarioReregister(r *runner) {
	ins := r.newInstance()
	if !r.register("register", ins) {
		return
	}
	bare := r.newInstance()
	bare.InstanceId = r.n.ExplicitID
	bare.Metadata = fargo.InstanceMetadata{}
	r.register("register_bare", bare)
	r.register("reregister_bare_read_back", bare)
	r.register("reregister_read_back", ins)
	ins.Port = r.n.Port + 2
	ins.HomePageUrl = fmt.Sprintf("http://%s:%d/", r.n.Host, ins.Port)
	r.register("reregister_changed", ins)
	r.getInstance("get_instance", "ok", r.n.ID)
	r.pollAppUntil("get_app", "ok", r.n.App, func(instances []*fargo.Instance, err error) bool {
		found := findID(instances, r.n.ID)
		return err == nil && found != nil && found.Port == r.n.Port+2
	})
}

// deregister: DeregisterInstance, then every call on the instance is a 404 and the app is gone.
func scenarioDeregister(r *runner) {
	ins := r.newInstance()
	if !r.register("register", ins) {
		return
	}
	r.heartbeat("heartbeat", "ok", ins)
	r.call("deregister", "ok", func() (interface{}, error) { return nil, r.conn.DeregisterInstance(ins) })
	r.getInstance("get_instance_after", "http:404", r.n.ID)
	r.heartbeat("heartbeat_after", "http:404", ins)
	r.updateStatus("status_after", "http:404", ins, fargo.DOWN)
	r.call("deregister_again", "http:404", func() (interface{}, error) { return nil, r.conn.DeregisterInstance(ins) })
	r.pollAppUntil("get_app_after", "app_not_found", r.n.App, func(_ []*fargo.Instance, err error) bool {
		var notFound fargo.AppNotFoundError
		return errors.As(err, &notFound)
	})
	var listed map[string]*fargo.Application
	r.poll("get_apps_after", "ok", func() (interface{}, error) {
		apps, err := r.conn.GetApps()
		listed = apps
		if err != nil {
			return nil, err
		}
		names := make([]string, 0, len(apps))
		for name := range apps {
			names = append(names, name)
		}
		sort.Strings(names)
		return map[string]interface{}{"apps": names}, nil
	}, func(_ interface{}, err error) bool {
		return err == nil && listed != nil && listed[r.n.App] == nil
	})
}

// amazon: an instance in an Amazon data center, with no instanceId: fargo and the server both take
// the id from the data center's instance-id. fargo sends every Amazon metadata key, unset ones empty.
func scenarioAmazon(r *runner) {
	ins := r.newInstance()
	amazonID := "i-" + strings.ReplaceAll(r.opts.tag, "-", "") + "0a1b2c3d"
	ins.DataCenterInfo = fargo.DataCenterInfo{
		Name: fargo.Amazon,
		Metadata: fargo.AmazonMetadataType{
			InstanceID:       amazonID,
			AvailabilityZone: "us-east-1c",
			LocalIpv4:        "10.0.1.7",
			PublicHostname:   "ec2-54-0-0-7.compute-1.amazonaws.com",
			InstanceType:     "m5.large",
		},
	}
	r.emit(map[string]interface{}{"event": "names", "amazon_id": amazonID})
	r.getInstance("get_instance_before", "http:404", amazonID)
	if !r.register("register", ins) {
		return
	}
	r.heartbeat("heartbeat", "ok", ins)
	r.getInstance("get_instance", "ok", amazonID)
	r.pollAppUntil("get_app", "ok", r.n.App, func(instances []*fargo.Instance, err error) bool {
		return err == nil && hasID(instances, amazonID)
	})
}
