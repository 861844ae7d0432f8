package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	v3statuspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds/csds"
)

const acceptsUsage = `usage: xds-go accepts -names NAME[,NAME...] [-wait 10s]

Asks grpc-go itself whether it takes what the control plane serves: opens a channel to xds:///NAME
for each name (bootstrap from GRPC_XDS_BOOTSTRAP, as the client command), so that grpc-go's xDS
client subscribes to the listener, its route configuration, the clusters it routes to and their
endpoints; then reads that client's own account of each resource (CSDS, in process) until every one
is settled or -wait passes. The backends need not exist: nothing is called.

One JSON line per resource the client holds:
  {"type":"Listener|RouteConfiguration|Cluster|ClusterLoadAssignment","name":...,"version":...,
   "status":"ACKED|NACKED|DOES_NOT_EXIST|REQUESTED|...","ok":bool,"error":"..."|null}
ok is status ACKED. Exit: 0 every resource ACKED, 1 one is not (or a name's listener never came),
2 bad usage.

flags:
`

func runAccepts(args []string) int {
	flags := flag.NewFlagSet("accepts", flag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), acceptsUsage)
		flags.PrintDefaults()
	}
	namesFlag := flags.String("names", "", "comma-separated service names (each dialled as xds:///NAME)")
	wait := flags.Duration("wait", 10*time.Second, "how long to wait for every resource to settle")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	var names []string
	for _, name := range strings.Split(*namesFlag, ",") {
		if name = strings.TrimSpace(name); name != "" {
			names = append(names, name)
		}
	}
	switch {
	case flags.NArg() > 0:
		fmt.Fprintf(os.Stderr, "unexpected arguments: %v\n", flags.Args())
		return 2
	case len(names) == 0:
		fmt.Fprintln(os.Stderr, "accepts needs -names")
		flags.Usage()
		return 2
	case os.Getenv("GRPC_XDS_BOOTSTRAP") == "" && os.Getenv("GRPC_XDS_BOOTSTRAP_CONFIG") == "":
		fmt.Fprintln(os.Stderr, "set GRPC_XDS_BOOTSTRAP to the xDS bootstrap file")
		return 2
	}

	for _, name := range names {
		conn, err := grpc.NewClient("xds:///"+name, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintf(os.Stderr, "cannot make a client for xds:///%s: %v\n", name, err)
			return 2
		}
		defer conn.Close()
		// A channel resolves its target only once it leaves IDLE.
		conn.Connect()
	}
	status, err := csds.NewClientStatusDiscoveryServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "CSDS: %v\n", err)
		return 2
	}
	defer status.Close()

	var held []*v3statuspb.ClientConfig_GenericXdsConfig
	previous := -1
	deadline := time.Now().Add(*wait)
	for {
		answer, err := status.FetchClientStatus(context.Background(), &v3statuspb.ClientStatusRequest{})
		if err != nil {
			fmt.Fprintf(os.Stderr, "CSDS: %v\n", err)
			return 2
		}
		held = nil
		for _, config := range answer.GetConfig() {
			held = append(held, config.GetGenericXdsConfigs()...)
		}
		// Settled: every listener asked for is there, nothing is still awaited, and the last look
		// found as many resources (a cluster's endpoints are asked for once the cluster came).
		if settled(held, names) && len(held) == previous {
			break
		}
		previous = len(held)
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	sort.Slice(held, func(i, j int) bool {
		if held[i].GetTypeUrl() != held[j].GetTypeUrl() {
			return held[i].GetTypeUrl() < held[j].GetTypeUrl()
		}
		return held[i].GetName() < held[j].GetName()
	})
	out := newLines()
	bad := 0
	listeners := map[string]bool{}
	for _, config := range held {
		if config.GetTypeUrl() == listenerType {
			listeners[config.GetName()] = true
		}
		line := acceptLine{
			Type: shortType(config.GetTypeUrl()), Name: config.GetName(), Version: config.GetVersionInfo(),
			Status: config.GetClientStatus().String(), OK: config.GetClientStatus() == adminv3.ClientResourceStatus_ACKED,
		}
		if detail := config.GetErrorState().GetDetails(); detail != "" {
			line.Error = &detail
		}
		if !line.OK {
			bad++
		}
		out.emit(line)
	}
	for _, name := range names {
		if !listeners[name] {
			text := fmt.Sprintf("grpc-go never asked for or held listener %q within %s", name, *wait)
			out.emit(acceptLine{Type: "Listener", Name: name, Status: "MISSING", Error: &text})
			bad++
		}
	}
	if bad > 0 {
		return 1
	}
	return 0
}

type acceptLine struct {
	Type    string  `json:"type"`
	Name    string  `json:"name"`
	Version string  `json:"version,omitempty"`
	Status  string  `json:"status"`
	OK      bool    `json:"ok"`
	Error   *string `json:"error"`
}

func settled(held []*v3statuspb.ClientConfig_GenericXdsConfig, names []string) bool {
	listeners := map[string]bool{}
	for _, config := range held {
		switch config.GetClientStatus() {
		case adminv3.ClientResourceStatus_REQUESTED, adminv3.ClientResourceStatus_UNKNOWN:
			return false
		}
		if config.GetTypeUrl() == listenerType {
			listeners[config.GetName()] = true
		}
	}
	for _, name := range names {
		if !listeners[name] {
			return false
		}
	}
	return true
}
