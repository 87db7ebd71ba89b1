// cri-session runs one scripted CRI session (images, a pod, a container, exec, teardown)
// against a CRI socket and prints one JSON line per RPC:
//
//	{"step":"ExecSync","code":"OK","message":"","response":{...}}
//
// It is a client in the style of the kubelet and crictl, on real grpc-go, for checking
// cri-bridge (and runtimes) from the outside. This file is shared by all CRI versions: build.sh
// points the runtimeapi import below at the version's Go package and adds version_VERSION.go.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// result is one output line.
type result struct {
	Step     string      `json:"step"`
	Code     string      `json:"code"`
	Message  string      `json:"message"`
	Response interface{} `json:"response"`
}

func main() {
	socket := flag.String("socket", "", "path of the CRI unix socket (required)")
	image := flag.String("image", "cri-bridge.test/busybox:1", "image to pull and then run")
	name := flag.String("name", "", "unique name of this run: pod name, pod uid and label value (default: made up)")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline of each call")
	authority := flag.String("authority", "", "HTTP/2 :authority to send instead of the socket path (debugging only)")
	idle := flag.Duration("idle", 0, "pause after Version with no call open (to meet a server's idle timeout and keepalive pings)")
	flag.Parse()
	if *socket == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *name == "" {
		*name = fmt.Sprintf("session-%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	// Without this check a wrong path would still "run" every step, each failing Unavailable.
	if info, err := os.Stat(*socket); err != nil || info.Mode()&os.ModeSocket == 0 {
		fmt.Fprintf(os.Stderr, "cri-session-%s: %s is not a unix socket (%v)\n", apiVersion, *socket, err)
		os.Exit(1)
	}

	// Dialled the way the kubelet and crictl dial: the socket path itself is the target, so
	// grpc-go sends it as :authority (which is exactly what a server must cope with).
	options := []grpc.DialOption{
		grpc.WithInsecure(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		}),
	}
	if *authority != "" {
		options = append(options, grpc.WithAuthority(*authority))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	conn, err := grpc.DialContext(ctx, *socket, options...)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cri-session-%s: cannot dial %s: %v\n", apiVersion, *socket, err)
		os.Exit(1)
	}
	defer conn.Close()

	s := &session{
		runtime: runtimeapi.NewRuntimeServiceClient(conn),
		images:  runtimeapi.NewImageServiceClient(conn),
		timeout: *timeout,
		idle:    *idle,
		out:     json.NewEncoder(os.Stdout),
	}
	s.out.SetEscapeHTML(false)
	if err := s.run(*image, *name); err != nil {
		fmt.Fprintf(os.Stderr, "cri-session-%s: %v\n", apiVersion, err)
		os.Exit(1)
	}
}

type session struct {
	runtime runtimeapi.RuntimeServiceClient
	images  runtimeapi.ImageServiceClient
	timeout time.Duration
	idle    time.Duration
	out     *json.Encoder
	outErr  error // the first failure to print a line: the session's output is then incomplete
}

// step makes one call under its own deadline and prints its line. A failed call is reported,
// never fatal: the point is to see every step's outcome.
func (s *session) step(name string, call func(ctx context.Context) (interface{}, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	response, err := call(ctx)
	st := status.Convert(err) // code OK and an empty message when err is nil
	line := result{Step: name, Code: st.Code().String(), Message: st.Message(), Response: response}
	if err != nil {
		line.Response = nil
		fmt.Fprintf(os.Stderr, "cri-session-%s: %s: %v\n", apiVersion, name, err)
	}
	if encodeErr := s.out.Encode(line); encodeErr != nil && s.outErr == nil {
		s.outErr = fmt.Errorf("cannot print the result of %s: %v", name, encodeErr)
	}
}

// run goes through the session; later steps run on with whatever IDs are known (possibly empty),
// so that a runtime's answer to each of them is still seen. Only a failure to print is an error.
func (s *session) run(image, name string) error {
	const label = "cri-bridge.test/session"
	imageSpec := &runtimeapi.ImageSpec{Image: image}
	var podID, containerID string

	s.step("Version", func(ctx context.Context) (interface{}, error) {
		return s.runtime.Version(ctx, &runtimeapi.VersionRequest{Version: apiVersion})
	})
	time.Sleep(s.idle)
	s.step("Status", func(ctx context.Context) (interface{}, error) {
		return s.runtime.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	})
	s.step("ImageFsInfo", func(ctx context.Context) (interface{}, error) {
		return s.images.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	})
	s.step("PullImage", func(ctx context.Context) (interface{}, error) {
		return s.images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: imageSpec})
	})
	s.step("ListImages", func(ctx context.Context) (interface{}, error) {
		return s.images.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	})
	s.step("ImageStatus", func(ctx context.Context) (interface{}, error) {
		return s.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: imageSpec})
	})

	// No log directory: the runtime then keeps no container logs, and nothing is written
	// outside its own state.
	podConfig := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Uid: name, Namespace: "cri-bridge-test", Attempt: 0},
		Labels:   map[string]string{label: name},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			// Host network: the test machines have no CNI.
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: hostNetwork()},
		},
	}
	s.step("RunPodSandbox", func(ctx context.Context) (interface{}, error) {
		r, err := s.runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig})
		if err == nil {
			podID = r.PodSandboxId
		}
		return r, err
	})
	s.step("PodSandboxStatus", func(ctx context.Context) (interface{}, error) {
		return s.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID, Verbose: true})
	})
	s.step("ListPodSandbox", func(ctx context.Context) (interface{}, error) {
		filter := &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{label: name}}
		return s.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: filter})
	})
	s.step("CreateContainer", func(ctx context.Context) (interface{}, error) {
		r, err := s.runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: podID,
			Config: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
				Image:    imageSpec,
				Command:  []string{"/bin/sleep", "3600"},
			},
			SandboxConfig: podConfig,
		})
		if err == nil {
			containerID = r.ContainerId
		}
		return r, err
	})
	s.step("StartContainer", func(ctx context.Context) (interface{}, error) {
		return s.runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: containerID})
	})
	s.step("ContainerStatus", func(ctx context.Context) (interface{}, error) {
		return s.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID, Verbose: true})
	})
	s.step("ExecSync", func(ctx context.Context) (interface{}, error) {
		return s.runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{
			ContainerId: containerID, Cmd: []string{"/bin/echo", "hello"}, Timeout: 10,
		})
	})
	// Only the streaming URL is asked for; connecting to it is another protocol (not CRI).
	s.step("Exec", func(ctx context.Context) (interface{}, error) {
		return s.runtime.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: containerID, Cmd: []string{"/bin/sh"}, Stdout: true})
	})
	s.step("ListContainers", func(ctx context.Context) (interface{}, error) {
		filter := &runtimeapi.ContainerFilter{PodSandboxId: podID}
		return s.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: filter})
	})
	s.step("ContainerStats", func(ctx context.Context) (interface{}, error) {
		return s.runtime.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: containerID})
	})
	s.step("StopContainer", func(ctx context.Context) (interface{}, error) {
		return s.runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: containerID, Timeout: 1})
	})
	s.step("RemoveContainer", func(ctx context.Context) (interface{}, error) {
		return s.runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerID})
	})
	s.step("StopPodSandbox", func(ctx context.Context) (interface{}, error) {
		return s.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID})
	})
	s.step("RemovePodSandbox", func(ctx context.Context) (interface{}, error) {
		return s.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID})
	})
	s.step("RemoveImage", func(ctx context.Context) (interface{}, error) {
		return s.images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: imageSpec})
	})
	return s.outErr
}
