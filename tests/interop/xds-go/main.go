// Command xds-go is the Go side of the mesh tests: Envoy's own validation rules, as go-control-plane
// generates them (protoc-gen-validate), applied to what an xDS server serves, and grpc-go's xds
// resolver as a proxyless client.
//
//	xds-go validate -server 127.0.0.1:18000 [-names orders,payments] [-timeout 10s] [-header k=v]
//	xds-go validate -bootstrap docs/examples/envoy-bootstrap.yaml
//	xds-go client -target xds:///orders -rate 20 -duration 8s [-call-timeout 1s]
//	xds-go accepts -names orders,payments [-wait 10s]
//	xds-go version
//
// Each subcommand prints its usage with -h. Every line on stdout is one JSON object; diagnostics go
// to stderr. Exit codes: 0 success, 1 a violation (validate), 2 bad usage or a failed connection.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
)

const usage = `usage: xds-go <command> [flags]

commands:
  validate   subscribe to an ADS server (state of the world, then delta) and check every resource
             and discovery response with go-control-plane's ValidateAll(); or, with -bootstrap FILE,
             check an Envoy bootstrap (YAML or JSON) the same way
  client     call /mesh.test.Who/Name through grpc-go's xds resolver at a steady rate, one JSON line
             per call (bootstrap from GRPC_XDS_BOOTSTRAP)
  accepts    ask grpc-go's own xDS client (CSDS) whether it ACKs every resource of xds:///NAME for
             each name given (bootstrap from GRPC_XDS_BOOTSTRAP); nothing is called
  version    print the versions of go-control-plane and grpc-go built in, as JSON

"xds-go <command> -h" lists the command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	command, args := os.Args[1], os.Args[2:]
	switch command {
	case "validate":
		os.Exit(runValidate(args))
	case "client":
		os.Exit(runClient(args))
	case "accepts":
		os.Exit(runAccepts(args))
	case "version":
		os.Exit(runVersion())
	case "-h", "-help", "--help", "help":
		fmt.Fprint(os.Stdout, usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", command, usage)
		os.Exit(2)
	}
}

// lines writes one JSON object per line on stdout, whole lines only, from any goroutine.
type lines struct {
	mu      sync.Mutex
	encoder *json.Encoder
}

func newLines() *lines {
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetEscapeHTML(false)
	return &lines{encoder: encoder}
}

func (l *lines) emit(value any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.encoder.Encode(value); err != nil {
		fmt.Fprintf(os.Stderr, "cannot write to stdout: %v\n", err)
		os.Exit(2)
	}
}

func runVersion() int {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(os.Stderr, "no build information in the binary")
		return 2
	}
	versions := map[string]string{"go": info.GoVersion}
	for _, dep := range info.Deps {
		switch dep.Path {
		case "github.com/envoyproxy/go-control-plane/envoy", "google.golang.org/grpc":
			versions[dep.Path] = dep.Version
		}
	}
	newLines().emit(versions)
	return 0
}
