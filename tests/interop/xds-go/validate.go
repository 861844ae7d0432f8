package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"
)

const (
	clusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	endpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	routeType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

const validateUsage = `usage: xds-go validate -server HOST:PORT [-tls-ca FILE [-tls-cert FILE -tls-key FILE]] [flags]
       xds-go validate -bootstrap FILE

With -server: opens an ADS stream (state of the world), subscribes to every cluster (CDS wildcard),
then to the endpoints (EDS) of every cluster named, to the listeners (LDS) of -names (the cluster
names when -names is empty) and to the route configurations (RDS) those listeners name; ACKs each
response; then does the same on a delta (incremental) ADS stream. Every resource and every discovery
response is checked with go-control-plane's ValidateAll() (Envoy's protoc-gen-validate rules), and
so is the message inside every Any it holds (e.g. a listener's HttpConnectionManager). Beyond those
rules, the checks Envoy makes when it applies a resource: the endpoint weights of a locality, and the
locality weights of a priority, each sum to at most 2^32-1. A resource subscribed by name that never
comes within -timeout is a violation too, and so is a response without a nonce.

One JSON line per resource and per response:
  {"stream":"sotw|delta","type":"Cluster|ClusterLoadAssignment|Listener|RouteConfiguration|
   DiscoveryResponse|DeltaDiscoveryResponse","name":...,"version":...,"ok":bool,"error":"..."|null}

With -bootstrap: reads an Envoy bootstrap (YAML, or JSON), parses it as Envoy does (unknown fields
are errors) and checks it the same way; one JSON line {"type":"Bootstrap","name":FILE,...}.

Exit: 0 no violation, 1 a violation, 2 bad usage or the stream failed.

flags:
`

type headerFlags []string

func (h *headerFlags) String() string     { return strings.Join(*h, ",") }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

type validateOptions struct {
	server    string
	names     []string
	timeout   time.Duration
	nodeID    string
	cluster   string
	headers   metadata.MD
	bootstrap string
	streams   string
	dump      bool
	tlsCA     string
	tlsCert   string
	tlsKey    string
}

type result struct {
	Stream  string  `json:"stream,omitempty"`
	Type    string  `json:"type"`
	Name    string  `json:"name"`
	Version string  `json:"version,omitempty"`
	OK      bool    `json:"ok"`
	Error   *string `json:"error"`
	// The resource itself (protojson, Envoy's JSON form), with -dump.
	Resource json.RawMessage `json:"resource,omitempty"`
}

func runValidate(args []string) int {
	flags := flag.NewFlagSet("validate", flag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), validateUsage)
		flags.PrintDefaults()
	}
	var (
		opts    validateOptions
		names   string
		headers headerFlags
	)
	flags.StringVar(&opts.server, "server", "", "ADS server address, HOST:PORT (plain gRPC unless -tls-ca is given)")
	flags.StringVar(&names, "names", "", "comma-separated listener names for LDS (default: the names CDS gave)")
	flags.DurationVar(&opts.timeout, "timeout", 10*time.Second, "how long to wait for each answer")
	flags.StringVar(&opts.nodeID, "node-id", "xds-go-validate", "node.id sent in the requests")
	flags.StringVar(&opts.cluster, "node-cluster", "xds-go", "node.cluster sent in the requests")
	flags.Var(&headers, "header", "KEY=VALUE request metadata on the streams (repeatable), e.g. authorization=Basic ...")
	flags.StringVar(&opts.bootstrap, "bootstrap", "", "check this Envoy bootstrap file instead of a server")
	flags.StringVar(&opts.streams, "streams", "sotw,delta", "which ADS streams to open: sotw, delta or both")
	flags.StringVar(&opts.tlsCA, "tls-ca", "", "connect over TLS, trusting the CA certificates of this PEM file")
	flags.StringVar(&opts.tlsCert, "tls-cert", "", "client certificate (PEM) to present over TLS, with -tls-key")
	flags.StringVar(&opts.tlsKey, "tls-key", "", "private key (PEM) of -tls-cert")
	flags.BoolVar(&opts.dump, "dump", false, "add each resource, in Envoy's JSON form, to its line (\"resource\")")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %v\n", flags.Args())
		return 2
	}
	out := newLines()
	if opts.bootstrap != "" {
		return validateBootstrap(opts.bootstrap, out)
	}
	if opts.server == "" {
		fmt.Fprintln(os.Stderr, "validate needs -server HOST:PORT or -bootstrap FILE")
		flags.Usage()
		return 2
	}
	for _, name := range strings.Split(names, ",") {
		if name = strings.TrimSpace(name); name != "" {
			opts.names = append(opts.names, name)
		}
	}
	opts.headers = metadata.MD{}
	for _, header := range headers {
		key, value, ok := strings.Cut(header, "=")
		if !ok || key == "" {
			fmt.Fprintf(os.Stderr, "-header %q: expected KEY=VALUE\n", header)
			return 2
		}
		opts.headers.Append(strings.ToLower(key), value)
	}

	creds, err := transportCredentials(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// A big fleet's endpoint assignments can outgrow gRPC's default 4 MB limit on a message.
	conn, err := grpc.NewClient(
		opts.server,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot dial %s: %v\n", opts.server, err)
		return 2
	}
	defer conn.Close()
	client := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	node := &corev3.Node{Id: opts.nodeID, Cluster: opts.cluster, UserAgentName: "xds-go-validate"}

	violations := 0
	for _, stream := range strings.Split(opts.streams, ",") {
		var run func(context.Context, discoveryv3.AggregatedDiscoveryServiceClient, *corev3.Node, validateOptions, *tally) error
		switch strings.TrimSpace(stream) {
		case "sotw":
			run = runSotw
		case "delta":
			run = runDelta
		default:
			fmt.Fprintf(os.Stderr, "-streams: unknown stream %q (sotw, delta)\n", stream)
			return 2
		}
		t := &tally{out: out, stream: strings.TrimSpace(stream), dump: opts.dump}
		ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.Background(), opts.headers))
		err := run(ctx, client, node, opts, t)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s stream: %v\n", stream, err)
			return 2
		}
		violations += t.violations
		fmt.Fprintf(os.Stderr, "%s stream: %d resources, %d responses, %d violations\n", stream, t.resources, t.responses, t.violations)
	}
	if violations > 0 {
		return 1
	}
	return 0
}

// transportCredentials are plain gRPC unless -tls-ca is given: then TLS, with a client certificate
// when -tls-cert and -tls-key are.
func transportCredentials(opts validateOptions) (credentials.TransportCredentials, error) {
	if opts.tlsCA == "" {
		if opts.tlsCert != "" || opts.tlsKey != "" {
			return nil, errors.New("-tls-cert and -tls-key need -tls-ca")
		}
		return insecure.NewCredentials(), nil
	}
	pem, err := os.ReadFile(opts.tlsCA)
	if err != nil {
		return nil, fmt.Errorf("-tls-ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("-tls-ca: no PEM certificate in %s", opts.tlsCA)
	}
	config := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if opts.tlsCert != "" || opts.tlsKey != "" {
		pair, err := tls.LoadX509KeyPair(opts.tlsCert, opts.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(config), nil
}

// tally prints each verdict and counts them.
type tally struct {
	out        *lines
	stream     string
	dump       bool
	resources  int
	responses  int
	violations int
}

func (t *tally) report(kind, name, version string, problems []string) {
	t.reportWith(kind, name, version, problems, nil)
}

func (t *tally) reportWith(kind, name, version string, problems []string, resource proto.Message) {
	line := result{Stream: t.stream, Type: kind, Name: name, Version: version, OK: len(problems) == 0}
	if !line.OK {
		text := problemText(problems)
		line.Error = &text
		t.violations++
	}
	if t.dump && resource != nil {
		if text, err := protojson.Marshal(resource); err == nil {
			line.Resource = text
		}
	}
	t.out.emit(line)
}

// resource checks one resource from a response of type typeURL: its Any holds that type, its name
// (when the response names it, as delta does) is the resource's own, and it passes check(). It
// returns the resource (nil when it cannot be read) and reports it.
func (t *tally) resource(typeURL string, packed *anypb.Any, givenName, version string) proto.Message {
	t.resources++
	kind := shortType(typeURL)
	if packed == nil {
		t.report(kind, givenName, version, []string{"no resource in the answer"})
		return nil
	}
	if packed.GetTypeUrl() != typeURL {
		t.report(kind, givenName, version, []string{fmt.Sprintf("resource of type %q in a %s answer", packed.GetTypeUrl(), kind)})
		return nil
	}
	message, err := packed.UnmarshalNew()
	if err != nil {
		t.report(kind, givenName, version, []string{fmt.Sprintf("cannot decode: %v", err)})
		return nil
	}
	name := resourceName(message)
	problems := append(check(message), envoyRules(message)...)
	if givenName != "" && givenName != name {
		problems = append(problems, fmt.Sprintf("sent under the name %q, but its own name is %q", givenName, name))
	}
	t.reportWith(kind, name, version, problems, message)
	return message
}

func resourceName(message proto.Message) string {
	switch m := message.(type) {
	case *clusterv3.Cluster:
		return m.GetName()
	case *endpointv3.ClusterLoadAssignment:
		return m.GetClusterName()
	case *listenerv3.Listener:
		return m.GetName()
	case *routev3.RouteConfiguration:
		return m.GetName()
	}
	return ""
}

func shortType(typeURL string) string {
	return typeURL[strings.LastIndex(typeURL, ".")+1:]
}

// edsNames are the names to ask EDS for: each EDS cluster's service_name, else its own name.
func edsNames(clusters []proto.Message) []string {
	var names []string
	for _, message := range clusters {
		c, ok := message.(*clusterv3.Cluster)
		if !ok {
			continue
		}
		name := c.GetName()
		if service := c.GetEdsClusterConfig().GetServiceName(); service != "" {
			name = service
		}
		names = append(names, name)
	}
	return unique(names)
}

func clusterNames(clusters []proto.Message) []string {
	var names []string
	for _, message := range clusters {
		if c, ok := message.(*clusterv3.Cluster); ok {
			names = append(names, c.GetName())
		}
	}
	return unique(names)
}

// routeNames are the route configurations the listeners' HttpConnectionManagers fetch with RDS
// (a listener's api_listener, as a proxyless gRPC client reads it, or its network filters).
func routeNames(listeners []proto.Message) []string {
	var names []string
	add := func(packed *anypb.Any) {
		if packed == nil {
			return
		}
		hcm := &hcmv3.HttpConnectionManager{}
		if packed.MessageIs(hcm) && packed.UnmarshalTo(hcm) == nil {
			if name := hcm.GetRds().GetRouteConfigName(); name != "" {
				names = append(names, name)
			}
		}
	}
	for _, message := range listeners {
		l, ok := message.(*listenerv3.Listener)
		if !ok {
			continue
		}
		add(l.GetApiListener().GetApiListener())
		for _, chain := range l.GetFilterChains() {
			for _, filter := range chain.GetFilters() {
				add(filter.GetTypedConfig())
			}
		}
	}
	return unique(names)
}

func unique(names []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, name := range names {
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// ------------------------------------------------------------------------- state of the world

type sotwStream struct {
	stream  discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	answers chan *discoveryv3.DiscoveryResponse
	failed  chan error
	node    *corev3.Node
	tally   *tally
	timeout time.Duration
	first   bool
	// The names subscribed by type (nil: wildcard): an ACK repeats them.
	subscribed map[string][]string
}

func runSotw(ctx context.Context, client discoveryv3.AggregatedDiscoveryServiceClient, node *corev3.Node, opts validateOptions, t *tally) error {
	stream, err := client.StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	s := &sotwStream{
		stream: stream, answers: make(chan *discoveryv3.DiscoveryResponse, 64), failed: make(chan error, 1),
		node: node, tally: t, timeout: opts.timeout, first: true, subscribed: map[string][]string{},
	}
	go func() {
		for {
			answer, err := stream.Recv()
			if err != nil {
				s.failed <- err
				return
			}
			s.answers <- answer
		}
	}()

	clusters, err := s.fetch(clusterType, nil)
	if err != nil {
		return err
	}
	if _, err := s.fetch(endpointType, edsNames(clusters)); err != nil {
		return err
	}
	listenerNames := opts.names
	if len(listenerNames) == 0 {
		listenerNames = clusterNames(clusters)
	}
	listeners, err := s.fetch(listenerType, listenerNames)
	if err != nil {
		return err
	}
	if _, err := s.fetch(routeType, routeNames(listeners)); err != nil {
		return err
	}
	return stream.CloseSend()
}

// fetch subscribes to names of typeURL (nil: wildcard), ACKs every answer, and returns the resources
// once each name has come (the first answer, for a wildcard). A name that does not come within the
// timeout is reported as a violation.
func (s *sotwStream) fetch(typeURL string, names []string) ([]proto.Message, error) {
	if names != nil && len(names) == 0 {
		return nil, nil
	}
	request := &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names}
	s.subscribed[typeURL] = names
	if s.first {
		request.Node = s.node
		s.first = false
	}
	if err := s.stream.Send(request); err != nil {
		return nil, fmt.Errorf("send %s request: %w", shortType(typeURL), why(err, s.failed, s.timeout))
	}
	got := map[string]proto.Message{}
	deadline := time.After(s.timeout)
	for {
		select {
		case err := <-s.failed:
			return nil, fmt.Errorf("waiting for %s: %w", shortType(typeURL), err)
		case <-deadline:
			if names == nil {
				return nil, fmt.Errorf("no %s answer within %s", shortType(typeURL), s.timeout)
			}
			return reportMissing(s.tally, typeURL, names, got, s.timeout), nil
		case answer := <-s.answers:
			s.tally.responses++
			problems := own(answer)
			if answer.GetNonce() == "" {
				problems = append(problems, "no nonce: the client cannot ACK it")
			}
			answerNames, known := s.subscribed[answer.GetTypeUrl()]
			if !known {
				problems = append(problems, fmt.Sprintf("answer of type %q, never subscribed to", answer.GetTypeUrl()))
			}
			s.tally.report("DiscoveryResponse", answer.GetTypeUrl(), answer.GetVersionInfo(), problems)
			for _, packed := range answer.GetResources() {
				if message := s.tally.resource(answer.GetTypeUrl(), packed, "", answer.GetVersionInfo()); message != nil && answer.GetTypeUrl() == typeURL {
					got[resourceName(message)] = message
				}
			}
			ack := &discoveryv3.DiscoveryRequest{
				TypeUrl: answer.GetTypeUrl(), ResourceNames: answerNames, VersionInfo: answer.GetVersionInfo(),
				ResponseNonce: answer.GetNonce(),
			}
			if err := s.stream.Send(ack); err != nil {
				return nil, fmt.Errorf("ACK %s: %w", shortType(typeURL), why(err, s.failed, s.timeout))
			}
			if answer.GetTypeUrl() == typeURL && (names == nil || hasAll(got, names)) {
				return values(got), nil
			}
		}
	}
}

func reportMissing(t *tally, typeURL string, names []string, got map[string]proto.Message, timeout time.Duration) []proto.Message {
	for _, name := range names {
		if _, ok := got[name]; !ok {
			t.report(shortType(typeURL), name, "", []string{fmt.Sprintf("subscribed, not sent within %s", timeout)})
		}
	}
	return values(got)
}

// why is the reason a send failed: gRPC's Send says only io.EOF when the server has ended the stream,
// and the stream's status (e.g. PermissionDenied and the server's message) comes with the next Recv.
func why(err error, failed <-chan error, timeout time.Duration) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	select {
	case status := <-failed:
		return status
	case <-time.After(timeout):
		return err
	}
}

func hasAll(got map[string]proto.Message, names []string) bool {
	for _, name := range names {
		if _, ok := got[name]; !ok {
			return false
		}
	}
	return true
}

func values(got map[string]proto.Message) []proto.Message {
	keys := make([]string, 0, len(got))
	for key := range got {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	out := make([]proto.Message, 0, len(keys))
	for _, key := range keys {
		out = append(out, got[key])
	}
	return out
}

// ------------------------------------------------------------------------- delta

type deltaStream struct {
	stream  discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	answers chan *discoveryv3.DeltaDiscoveryResponse
	failed  chan error
	node    *corev3.Node
	tally   *tally
	timeout time.Duration
	first   bool
	// The types subscribed to so far.
	subscribed map[string]bool
}

func runDelta(ctx context.Context, client discoveryv3.AggregatedDiscoveryServiceClient, node *corev3.Node, opts validateOptions, t *tally) error {
	stream, err := client.DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	s := &deltaStream{
		stream: stream, answers: make(chan *discoveryv3.DeltaDiscoveryResponse, 64), failed: make(chan error, 1),
		node: node, tally: t, timeout: opts.timeout, first: true, subscribed: map[string]bool{},
	}
	go func() {
		for {
			answer, err := stream.Recv()
			if err != nil {
				s.failed <- err
				return
			}
			s.answers <- answer
		}
	}()

	clusters, err := s.fetch(clusterType, nil)
	if err != nil {
		return err
	}
	if _, err := s.fetch(endpointType, edsNames(clusters)); err != nil {
		return err
	}
	listenerNames := opts.names
	if len(listenerNames) == 0 {
		listenerNames = clusterNames(clusters)
	}
	listeners, err := s.fetch(listenerType, listenerNames)
	if err != nil {
		return err
	}
	if _, err := s.fetch(routeType, routeNames(listeners)); err != nil {
		return err
	}
	return stream.CloseSend()
}

// fetch is sotwStream.fetch on the delta stream: subscribe (nil: wildcard), ACK each answer by its
// nonce, and return once every name has come.
func (s *deltaStream) fetch(typeURL string, names []string) ([]proto.Message, error) {
	if names != nil && len(names) == 0 {
		return nil, nil
	}
	request := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names}
	s.subscribed[typeURL] = true
	if s.first {
		request.Node = s.node
		s.first = false
	}
	if err := s.stream.Send(request); err != nil {
		return nil, fmt.Errorf("send %s request: %w", shortType(typeURL), why(err, s.failed, s.timeout))
	}
	got := map[string]proto.Message{}
	deadline := time.After(s.timeout)
	for {
		select {
		case err := <-s.failed:
			return nil, fmt.Errorf("waiting for %s: %w", shortType(typeURL), err)
		case <-deadline:
			if names == nil {
				return nil, fmt.Errorf("no %s answer within %s", shortType(typeURL), s.timeout)
			}
			return reportMissing(s.tally, typeURL, names, got, s.timeout), nil
		case answer := <-s.answers:
			s.tally.responses++
			problems := own(answer)
			if answer.GetNonce() == "" {
				problems = append(problems, "no nonce: the client cannot ACK it")
			}
			if !s.subscribed[answer.GetTypeUrl()] {
				problems = append(problems, fmt.Sprintf("answer of type %q, never subscribed to", answer.GetTypeUrl()))
			}
			s.tally.report("DeltaDiscoveryResponse", answer.GetTypeUrl(), answer.GetSystemVersionInfo(), problems)
			for _, r := range answer.GetResources() {
				if message := s.tally.resource(answer.GetTypeUrl(), r.GetResource(), r.GetName(), r.GetVersion()); message != nil && answer.GetTypeUrl() == typeURL {
					got[resourceName(message)] = message
				}
			}
			ack := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: answer.GetTypeUrl(), ResponseNonce: answer.GetNonce()}
			if err := s.stream.Send(ack); err != nil {
				return nil, fmt.Errorf("ACK %s: %w", shortType(typeURL), why(err, s.failed, s.timeout))
			}
			if answer.GetTypeUrl() == typeURL && (names == nil || hasAll(got, names)) {
				return values(got), nil
			}
		}
	}
}

// ------------------------------------------------------------------------- bootstrap

func validateBootstrap(path string, out *lines) int {
	raw, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot read %s: %v\n", path, err)
		return 2
	}
	name := filepath.Base(path)
	problems := bootstrapProblems(raw, strings.HasSuffix(path, ".json"))
	line := result{Type: "Bootstrap", Name: name, OK: len(problems) == 0}
	if !line.OK {
		text := problemText(problems)
		line.Error = &text
	}
	out.emit(line)
	if !line.OK {
		return 1
	}
	return 0
}

// bootstrapProblems parses an Envoy bootstrap as Envoy does (YAML is JSON's superset: converted first;
// unknown fields are errors) and checks it.
func bootstrapProblems(raw []byte, isJSON bool) []string {
	text := raw
	if !isJSON {
		converted, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return []string{fmt.Sprintf("not YAML: %v", err)}
		}
		text = converted
	}
	bootstrap := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(text, bootstrap); err != nil {
		return []string{fmt.Sprintf("not an envoy.config.bootstrap.v3.Bootstrap: %v", err)}
	}
	problems := check(bootstrap)
	if len(problems) == 0 && proto.Size(bootstrap) == 0 {
		return []string{"empty bootstrap"}
	}
	return problems
}

// own is a discovery response's own violations: those of the resources in it are reported with each
// resource.
func own(answer validator) []string {
	var problems []string
	if err := answer.ValidateAll(); err != nil {
		for _, one := range flatten(err) {
			problems = append(problems, one.Error())
		}
	}
	return problems
}

// envoyRules are the checks Envoy makes beyond protoc-gen-validate's when it applies a resource
// (upstream_impl.cc): weights are uint32 and their sums must fit in one.
func envoyRules(message proto.Message) []string {
	assignment, ok := message.(*endpointv3.ClusterLoadAssignment)
	if !ok {
		return nil
	}
	const most = uint64(1<<32 - 1)
	var problems []string
	byPriority := map[uint32]uint64{}
	for i, locality := range assignment.GetEndpoints() {
		var sum uint64
		for _, endpoint := range locality.GetLbEndpoints() {
			weight := uint64(1)
			if endpoint.GetLoadBalancingWeight() != nil {
				weight = uint64(endpoint.GetLoadBalancingWeight().GetValue())
			}
			sum += weight
		}
		if sum > most {
			problems = append(problems, fmt.Sprintf("endpoints[%d]: the endpoint weights sum to %d, over 2^32-1", i, sum))
		}
		if locality.GetLoadBalancingWeight() != nil {
			byPriority[locality.GetPriority()] += uint64(locality.GetLoadBalancingWeight().GetValue())
		}
	}
	for priority, sum := range byPriority {
		if sum > most {
			problems = append(problems, fmt.Sprintf("priority %d: the locality weights sum to %d, over 2^32-1", priority, sum))
		}
	}
	return problems
}
