//go:build cri_streams

// cri-streams opens each server-streaming list call of CRI v1 (the Stream* RPCs, new in
// Kubernetes 1.36; on k8s.io/cri-api's v1 package, which has them) and prints one JSON line per
// call:
//
//	{"step":"StreamContainers","code":"OK","message":"","items":3,"messages":2,"end_code":"OK","end_message":""}
//
// code/message: the status of the stream's first Recv (OK when it brought a message or io.EOF),
// which is what the kubelet looks at: a first Recv that ends UNIMPLEMENTED makes it fall back to
// the unary List* call. items: how many list items came (summed over the messages) before the
// stream ended; end_code/end_message: how it ended (OK for io.EOF). GetContainerEvents is not a
// list and is left out.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const binary = "cri-streams-v1"

type result struct {
	Step       string `json:"step"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	Items      int    `json:"items"`
	Messages   int    `json:"messages"`
	EndCode    string `json:"end_code"`
	EndMessage string `json:"end_message"`
}

func main() {
	socket := flag.String("socket", "", "path of the CRI unix socket (required)")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline of each stream")
	flag.Parse()
	if *socket == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if info, err := os.Stat(*socket); err != nil || info.Mode()&os.ModeSocket == 0 {
		fmt.Fprintf(os.Stderr, "%s: %s is not a unix socket (%v)\n", binary, *socket, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	conn, err := grpc.DialContext(ctx, *socket, grpc.WithInsecure(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		}))
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: cannot dial %s: %v\n", binary, *socket, err)
		os.Exit(1)
	}
	defer conn.Close()
	runtime := runtimeapi.NewRuntimeServiceClient(conn)
	images := runtimeapi.NewImageServiceClient(conn)
	out := json.NewEncoder(os.Stdout)

	// Each opener starts the stream and returns a function receiving one message: its item
	// count, or the error (io.EOF at the end).
	type recv func() (int, error)
	calls := []struct {
		name string
		open func(ctx context.Context) (recv, error)
	}{
		{"StreamPodSandboxes", func(ctx context.Context) (recv, error) {
			s, err := runtime.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{})
			return func() (int, error) { m, err := s.Recv(); return len(m.GetPodSandboxes()), err }, err
		}},
		{"StreamContainers", func(ctx context.Context) (recv, error) {
			s, err := runtime.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{})
			return func() (int, error) { m, err := s.Recv(); return len(m.GetContainers()), err }, err
		}},
		{"StreamContainerStats", func(ctx context.Context) (recv, error) {
			s, err := runtime.StreamContainerStats(ctx, &runtimeapi.StreamContainerStatsRequest{})
			return func() (int, error) { m, err := s.Recv(); return len(m.GetContainerStats()), err }, err
		}},
		{"StreamPodSandboxStats", func(ctx context.Context) (recv, error) {
			s, err := runtime.StreamPodSandboxStats(ctx, &runtimeapi.StreamPodSandboxStatsRequest{})
			return func() (int, error) { m, err := s.Recv(); return len(m.GetPodSandboxStats()), err }, err
		}},
		{"StreamPodSandboxMetrics", func(ctx context.Context) (recv, error) {
			s, err := runtime.StreamPodSandboxMetrics(ctx, &runtimeapi.StreamPodSandboxMetricsRequest{})
			return func() (int, error) { m, err := s.Recv(); return len(m.GetPodSandboxMetrics()), err }, err
		}},
		{"StreamImages", func(ctx context.Context) (recv, error) {
			s, err := images.StreamImages(ctx, &runtimeapi.StreamImagesRequest{})
			return func() (int, error) { m, err := s.Recv(); return len(m.GetImages()), err }, err
		}},
	}
	failed := false
	for _, call := range calls {
		line := run(call.name, *timeout, func(ctx context.Context) (func() (int, error), error) { return call.open(ctx) })
		if err := out.Encode(line); err != nil {
			failed = true
			fmt.Fprintf(os.Stderr, "%s: cannot print the result of %s: %v\n", binary, call.name, err)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// run opens one stream and reads it to its end.
func run(name string, timeout time.Duration, open func(ctx context.Context) (func() (int, error), error)) result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	line := result{Step: name}
	next, err := open(ctx)
	if err != nil {
		// grpc-go reports a server-streaming call's status on Recv, not here; kept for safety.
		st := status.Convert(err)
		line.Code, line.Message = st.Code().String(), st.Message()
		line.EndCode, line.EndMessage = line.Code, line.Message
		return line
	}
	for first := true; ; first = false {
		n, err := next()
		code, message := "OK", ""
		if err != nil && err != io.EOF {
			st := status.Convert(err)
			code, message = st.Code().String(), st.Message()
			fmt.Fprintf(os.Stderr, "%s: %s: %v\n", binary, name, err)
		}
		if first {
			line.Code, line.Message = code, message
		}
		if err != nil {
			line.EndCode, line.EndMessage = code, message
			return line
		}
		line.Messages++
		line.Items += n
	}
}
