package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	// The xds:/// resolver and the xDS load-balancing policies (cds, eds, round robin by locality).
	_ "google.golang.org/grpc/xds"
)

const clientUsage = `usage: xds-go client -target xds:///NAME [flags]

Calls METHOD (google.protobuf.Empty in, google.protobuf.StringValue out: the backend's name) through
grpc-go's xds resolver, RATE calls a second for DURATION, each call on its own (a slow call does not
delay the next). The xDS bootstrap is the file GRPC_XDS_BOOTSTRAP names (or the JSON in
GRPC_XDS_BOOTSTRAP_CONFIG), as for any grpc-go client.

One JSON line per call, in the order the calls end:
  {"event":"call","t":UNIX_MS,"ms":LATENCY_MS,"backend":"NAME","peer":"HOST:PORT"}   answered
  {"event":"call","t":UNIX_MS,"ms":LATENCY_MS,"error":"rpc error: code = ..."}       failed
"t" is when the call started. The last call starts before DURATION has passed; the program exits 0
once every call has ended (at most CALL-TIMEOUT later), whatever the calls answered; 2 on bad usage.

flags:
`

func runClient(args []string) int {
	flags := flag.NewFlagSet("client", flag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), clientUsage)
		flags.PrintDefaults()
	}
	target := flags.String("target", "", "gRPC target, e.g. xds:///orders")
	method := flags.String("method", "/mesh.test.Who/Name", "full method name")
	rate := flags.Float64("rate", 20, "calls a second")
	duration := flags.Duration("duration", 8*time.Second, "how long to start calls for")
	callTimeout := flags.Duration("call-timeout", time.Second, "deadline of each call")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	switch {
	case flags.NArg() > 0:
		fmt.Fprintf(os.Stderr, "unexpected arguments: %v\n", flags.Args())
		return 2
	case *target == "":
		fmt.Fprintln(os.Stderr, "client needs -target, e.g. -target xds:///orders")
		flags.Usage()
		return 2
	case *rate <= 0 || *duration <= 0 || *callTimeout <= 0:
		fmt.Fprintln(os.Stderr, "-rate, -duration and -call-timeout must be positive")
		return 2
	case os.Getenv("GRPC_XDS_BOOTSTRAP") == "" && os.Getenv("GRPC_XDS_BOOTSTRAP_CONFIG") == "":
		fmt.Fprintln(os.Stderr, "set GRPC_XDS_BOOTSTRAP to the xDS bootstrap file")
		return 2
	}

	conn, err := grpc.NewClient(*target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot make a client for %s: %v\n", *target, err)
		return 2
	}
	defer conn.Close()

	out := newLines()
	interval := time.Duration(float64(time.Second) / *rate)
	start := time.Now()
	var calls sync.WaitGroup
	for next := start; time.Since(start) < *duration; next = next.Add(interval) {
		time.Sleep(time.Until(next))
		calls.Add(1)
		go func() {
			defer calls.Done()
			out.emit(call(conn, *method, *callTimeout))
		}()
	}
	calls.Wait()
	return 0
}

type callLine struct {
	Event   string  `json:"event"`
	T       int64   `json:"t"`
	Ms      float64 `json:"ms"`
	Backend *string `json:"backend,omitempty"`
	Peer    string  `json:"peer,omitempty"`
	Error   *string `json:"error,omitempty"`
}

func call(conn *grpc.ClientConn, method string, timeout time.Duration) callLine {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	reply := &wrapperspb.StringValue{}
	var from peer.Peer
	err := conn.Invoke(ctx, method, &emptypb.Empty{}, reply, grpc.Peer(&from))
	line := callLine{Event: "call", T: began.UnixMilli(), Ms: float64(time.Since(began).Microseconds()) / 1000}
	if from.Addr != nil {
		line.Peer = from.Addr.String()
	}
	if err != nil {
		text := err.Error()
		line.Error = &text
		return line
	}
	name := reply.GetValue()
	line.Backend = &name
	return line
}
