//go:build cri_kubelet

// cri-kubelet replays, on k8s.io/cri-api's v1 package and grpc-go (the kubelet's own client
// stack, at the versions Kubernetes 1.37 builds with), the CRI calls a kubelet of Kubernetes 1.37
// makes at start and for one ordinary pod, with the field values the kubelet sets. It prints one JSON line per call, as cri-session does:
//
//	{"step":"CreateContainer","code":"OK","message":"","response":{...}}
//
// The pod: one container, restartPolicy Always, no securityContext in the spec (the API server
// defaults it to an empty PodSecurityContext), dnsPolicy ClusterFirst, no ports, no volumes (the
// service account token's projected volume is left out), no resources (a BestEffort pod),
// imagePullPolicy Always, terminationGracePeriodSeconds 30, and the kubelet's defaults on:
// seccompDefault, UserNamespacesSupport (GA and locked on since 1.36), MemoryQoS (beta, on by
// default since 1.37), CRIListStreaming off (alpha), cgroup v2 when the node has it. Its command
// traps SIGTERM, so StopContainer ends it at once.
//
// What sets each field (kubelet 1.37.2 source, pkg/kubelet/…; "kuberuntime" is
// pkg/kubelet/kuberuntime; the CRI client is k8s.io/cri-client's pkg/remote_runtime.go):
//
// The connection (cri-client remote_runtime.go NewRemoteRuntimeService): grpc.NewClient on
// "passthrough:///<socket path>" with a unix dialer, insecure credentials, :authority "localhost"
// (grpc.WithAuthority), a 16 MiB receive limit (MaxCallRecvMsgSize) and connect backoff 100 ms to
// 3 s with a 5 s minimum connect timeout. (Its otelgrpc stats handler with the no-op tracer
// provider adds nothing to the wire and is left out.)
//
// Start (kubelet.go, kuberuntime_manager.go NewKubeGenericRuntimeManager):
//   - Version.version "0.1.0": kuberuntime's kubeRuntimeAPIVersion, sent on every Version call.
//   - RuntimeConfig (no fields): kubelet.go getCgroupDriverConfig, the cgroup driver from the
//     runtime (KubeletCgroupDriverFromCRI); UNIMPLEMENTED makes it fall back to its own config.
//   - Status verbose=false: kubelet.go updateRuntimeUp -> kuberuntime Status(ctx, false).
//   - ImageFsInfo (no fields): the stats provider (cri_stats_provider ImageFsStats).
//   - UpdateRuntimeConfig runtime_config.network_config.pod_cidr: kubelet_network.go
//     updatePodCIDR, once the node's spec.podCIDR is known (-pod-cidr).
//
// RunPodSandbox (kuberuntime_sandbox.go generatePodSandboxConfig, createPodSandbox):
//   - metadata name/namespace/uid/attempt 0: generatePodSandboxConfig.
//   - labels: the pod's labels plus io.kubernetes.pod.{name,namespace,uid}: labels.go newPodLabels.
//   - annotations: the pod's annotations (the kubelet's config source adds
//     kubernetes.io/config.seen and kubernetes.io/config.source=api): labels.go newPodAnnotations.
//   - dns_config: GetPodDNS (pkg/kubelet/network/dns): ClusterFirst gives the cluster DNS server,
//     the searches <ns>.svc.<domain>, svc.<domain>, <domain> (plus the host's) and ndots:5; a host
//     network pod with ClusterFirst falls back to the host's resolv.conf.
//   - hostname: the pod name (GeneratePodHostNameAndDomain), not set for a host-network pod.
//   - log_directory /var/log/pods/<ns>_<name>_<uid>: BuildPodLogsDirectory (created by the kubelet
//     before the call: createPodSandbox's MkdirAll).
//   - port_mappings: none (no container ports).
//   - linux.cgroup_parent: GetPodCgroupParent (pkg/kubelet/cm): "kubepods-besteffort-pod<uid>.slice"
//     (systemd driver) or "/kubepods/besteffort/pod<uid>" (cgroupfs; -cgroup-parent overrides).
//   - linux.security_context.seccomp RuntimeDefault (the SecurityProfile message; no
//     seccomp_profile_path string since the sandbox always gets RuntimeDefault, issue #84623):
//     kuberuntime_sandbox.go generatePodSandboxLinuxConfig.
//   - linux.security_context.privileged false (HasPrivilegedContainer); run_as_user/run_as_group
//     unset (not in the pod's securityContext); supplemental_groups none; selinux_options unset;
//     supplemental_groups_policy unset (Merge, the pod does not set it): the same function.
//   - linux.security_context.namespace_options: kuberuntime/util NamespacesForPod: network POD
//     (NODE for a host-network pod), pid CONTAINER (no shareProcessNamespace), ipc POD, and
//     userns_options {mode NODE} from the userns manager's GetOrCreateUserNamespaceMappings when
//     UserNamespacesSupport is on and spec.hostUsers is unset.
//   - linux.sysctls: none (an empty map: nothing on the wire).
//   - linux.overhead: an empty LinuxContainerResources (no pod overhead), and linux.resources:
//     calculateLinuxResources of the pod's requests/limits (none): cpu_shares 2 (MilliCPUToShares
//     of 0), cpu_period 100000, cpu_quota 0 (cpuCFSQuota on), and on cgroup v2 unified
//     memory.oom.group=1 (singleProcessOOMKill false): kuberuntime_sandbox_linux.go
//     applySandboxResources / kuberuntime_container_linux.go calculateLinuxResources.
//
// PullImage (images/image_manager.go EnsureImageExists; kuberuntime_image.go PullImage):
//   - Every ImageSpec of these calls has image = the container's image (a default ":latest"
//     applied) and annotations = the pod's annotations; PullImage has no auth and sandbox_config =
//     the RunPodSandbox config. user_specified_image is NOT set on this ImageSpec
//     (ToRuntimeAPIImageSpec sets image, annotations and, only with the alpha
//     RuntimeClassInImageCriAPI gate, runtime_handler).
//   - The calls, by -pull-policy (the pod's imagePullPolicy):
//     Always: PullImage, then ImageStatus for the image's size (images/puller.go GetImageSize);
//     imagePullPrecheck asks nothing first. Steps "PullImage", "ImageStatus(size)".
//     IfNotPresent: ImageStatus (GetImageRef, imagePullPrecheck); only when it finds no image,
//     PullImage and ImageStatus(size). Steps "ImageStatus", then maybe "PullImage",
//     "ImageStatus(size)".
//     "" (the default): ImageStatus, PullImage: the order of kubelets before 1.30 and the steps
//     tests/kubelet_defaults.rs expects. No kubelet 1.37 makes exactly these calls (it is
//     IfNotPresent for an absent image without the size query, or Always with the ImageStatus
//     before the pull); each request's fields are still the 1.37 kubelet's.
//   - ImageStatus again with {image: container.Image}: kuberuntime helpers.go getImageUser,
//     for run_as_user.
//
// CreateContainer (kuberuntime_container.go generateContainerConfig, kuberuntime_container_linux.go
// generateLinuxContainerConfig, security_context.go determineEffectiveSecurityContext):
//   - metadata name, attempt 0 (restart count); image {image: the image_ref PullImage returned,
//     user_specified_image: container.Image}; command/args from the spec; working_dir unset.
//   - labels io.kubernetes.container.name, io.kubernetes.pod.{name,namespace,uid}:
//     newContainerLabels; annotations io.kubernetes.container.{hash,restartCount,
//     terminationMessagePath,terminationMessagePolicy}, io.kubernetes.pod.terminationGracePeriod:
//     newContainerAnnotations.
//   - envs: the service links of the default namespace's "kubernetes" service
//     (KUBERNETES_SERVICE_HOST, …; enableServiceLinks true): kubelet_pods.go makeEnvironmentVariables.
//   - mounts: /etc/hosts from <root>/pods/<uid>/etc-hosts (kubelet_pods.go makeHostsMount, the
//     kubelet-managed hosts file; selinux_relabel only on SELinux hosts) and
//     /dev/termination-log from <root>/pods/<uid>/containers/<name>/<random id> (kuberuntime
//     makeMounts); both files are created, as the kubelet does, before the call.
//   - log_path "<name>/0.log" (buildContainerLogsPath; its directory is created first).
//   - linux.resources: generateLinuxContainerResources: cpu_shares 2, cpu_period 100000, cpu_quota
//     0, oom_score_adj 1000 (BestEffort, qos.GetContainerOOMScoreAdjust), hugepage_limits: every
//     page size of the host with limit 0 (GetHugepageLimitsFromResources), and on cgroup v2 unified
//     {memory.oom.group: 1, memory.swap.max: 0, memory.min: 0, memory.low: 0}
//     (calculateLinuxResources; configureContainerSwapResources -> ConfigureNoSwap, NoSwap being
//     the default swap behaviour; MemoryQoS with the default memoryReservationPolicy None and no
//     memoryThrottlingFactor, whose default is nil since 1.37, so no memory.high). On cgroup v1 no
//     unified (and memory_swap_limit_in_bytes = memory limit = 0).
//   - linux.security_context: capabilities unset (the runtime's default set), privileged false,
//     run_as_user = the image's uid from ImageStatus, 0 when the image names none (getImageUser),
//     or run_as_username when it names a user; run_as_group unset; supplemental_groups none;
//     supplemental_groups_policy unset (Merge); no_new_privs false (allowPrivilegeEscalation
//     unset); readonly_rootfs false; seccomp RuntimeDefault (getSeccompProfile with
//     seccompDefault on; seccomp_profile_path not set); apparmor unset (no profile in the pod);
//     namespace_options as the sandbox's (NamespacesForPod); masked_paths and readonly_paths the
//     defaults of pkg/securitycontext (ConvertToRuntimeMaskedPaths/ReadonlyPaths; the masked
//     paths end with /sys/devices/system/cpu/cpu<N>/thermal_throttle of each possible CPU that
//     has one).
//   - mounts carry no mount_options: the kubelet sets them only from a volume mount's
//     bindMountOptions (VolumeBindMountOptions), and only when the runtime's Status reports the
//     mount_options feature; this pod has no volume mounts.
//   - sandbox_config: the RunPodSandbox config.
//
// Then StartContainer; ContainerStatus verbose=false (getPodContainerStatuses); ListContainers
// and ListPodSandbox filtered by the label io.kubernetes.pod.uid (getPodContainerStatuses,
// getSandboxIDByPodUID); ContainerStats; StopContainer with timeout 30 (the grace period:
// killContainer); RemoveContainer; StopPodSandbox; RemovePodSandbox (killPodWithSyncResult and
// the pod's cleanup).
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const binary = "cri-kubelet-v1"

// result is one output line.
type result struct {
	Step     string      `json:"step"`
	Code     string      `json:"code"`
	Message  string      `json:"message"`
	Response interface{} `json:"response"`
}

func main() {
	socket := flag.String("socket", "", "path of the CRI unix socket (required)")
	image := flag.String("image", "docker.io/library/busybox:latest", "the container's image, as in the pod spec")
	pauseImage := flag.String("pause-image", "registry.k8s.io/pause:3.10", "the runtime's sandbox image (only reported: the runtime pulls it itself)")
	cgroupParent := flag.String("cgroup-parent", "", "the pod's cgroup parent (default: the cgroupfs driver's /kubepods/besteffort/pod<uid>)")
	name := flag.String("name", "", "pod name (default: made up; the pod uid is derived from it)")
	namespace := flag.String("namespace", "default", "pod namespace")
	root := flag.String("root", "", "the kubelet's root directory, for the pod's files (default: a new temporary directory)")
	logRoot := flag.String("log-root", "", "where pod log directories go (default: <root>/log/pods)")
	cgroup := flag.String("cgroup-v2", "auto", "send what the kubelet sends on a cgroup v2 node: true, false or auto (look at /sys/fs/cgroup)")
	hostNetwork := flag.Bool("host-network", false, "a hostNetwork pod (for runtimes without CNI)")
	podCIDR := flag.String("pod-cidr", "10.244.0.0/24", "the node's pod CIDR, sent by UpdateRuntimeConfig")
	pullPolicy := flag.String("pull-policy", "", "the container's imagePullPolicy, Always or IfNotPresent, for a 1.37 kubelet's image calls (default: the older order, ImageStatus then PullImage)")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline of each call")
	flag.Parse()
	if *socket == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *name == "" {
		*name = fmt.Sprintf("kubelet-%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	if info, err := os.Stat(*socket); err != nil || info.Mode()&os.ModeSocket == 0 {
		fail("%s is not a unix socket (%v)", *socket, err)
	}
	var v2 bool
	switch *cgroup {
	case "true":
		v2 = true
	case "false":
		v2 = false
	case "auto":
		v2 = isCgroup2UnifiedMode()
	default:
		fail("-cgroup-v2 must be true, false or auto, not %q", *cgroup)
	}
	switch *pullPolicy {
	case "", "Always", "IfNotPresent":
	default:
		fail("-pull-policy must be Always or IfNotPresent, not %q", *pullPolicy)
	}
	if *root == "" {
		dir, err := os.MkdirTemp("", "cri-kubelet-")
		if err != nil {
			fail("cannot make a root directory: %v", err)
		}
		*root = dir
	}
	if *logRoot == "" {
		*logRoot = filepath.Join(*root, "log", "pods")
	}

	// Connected as the kubelet connects (cri-client remote_runtime.go): a passthrough target,
	// so that the dialer gets the socket path, and :authority "localhost".
	connect := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 5 * time.Second}
	connect.Backoff.BaseDelay = 100 * time.Millisecond
	connect.Backoff.MaxDelay = 3 * time.Second
	conn, err := grpc.NewClient("passthrough:///"+*socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16*1024*1024)),
		grpc.WithConnectParams(connect))
	if err != nil {
		fail("cannot dial %s: %v", *socket, err)
	}
	defer conn.Close()

	k := &kubelet{
		runtime:  runtimeapi.NewRuntimeServiceClient(conn),
		images:   runtimeapi.NewImageServiceClient(conn),
		timeout:  *timeout,
		out:      json.NewEncoder(os.Stdout),
		cgroupV2: v2,
		pod: pod{
			name:         *name,
			namespace:    *namespace,
			uid:          podUID(*name),
			image:        *image,
			pauseImage:   *pauseImage,
			cgroupParent: *cgroupParent,
			hostNetwork:  *hostNetwork,
			pullPolicy:   *pullPolicy,
			root:         *root,
			logRoot:      *logRoot,
		},
	}
	k.out.SetEscapeHTML(false)
	if err := k.run(*podCIDR); err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, binary+": "+format+"\n", args...)
	os.Exit(1)
}

// pod is the ordinary pod's spec, as far as the kubelet's requests depend on it.
type pod struct {
	name, namespace, uid string
	image, pauseImage    string
	cgroupParent         string
	hostNetwork          bool
	pullPolicy           string
	root, logRoot        string
}

const (
	containerName          = "app"
	terminationMessagePath = "/dev/termination-log"
	gracePeriod            = 30
	clusterDNS             = "10.96.0.10"
	clusterDomain          = "cluster.local"
)

// The container's command: exits at once on SIGTERM (a plain sleep as PID 1 would ignore it).
var command = []string{"/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"}

type kubelet struct {
	runtime  runtimeapi.RuntimeServiceClient
	images   runtimeapi.ImageServiceClient
	timeout  time.Duration
	out      *json.Encoder
	outErr   error
	cgroupV2 bool
	pod      pod
}

// step makes one call under its own deadline and prints its line; a failure is reported and
// the session goes on.
func (k *kubelet) step(name string, call func(ctx context.Context) (interface{}, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), k.timeout)
	defer cancel()
	response, err := call(ctx)
	st := status.Convert(err)
	line := result{Step: name, Code: st.Code().String(), Message: st.Message(), Response: response}
	if err != nil {
		line.Response = nil
		fmt.Fprintf(os.Stderr, "%s: %s: %v\n", binary, name, err)
	}
	if encodeErr := k.out.Encode(line); encodeErr != nil && k.outErr == nil {
		k.outErr = fmt.Errorf("cannot print the result of %s: %v", name, encodeErr)
	}
}

func (k *kubelet) run(podCIDR string) error {
	p := k.pod

	// --- start ---
	k.step("Version", func(ctx context.Context) (interface{}, error) {
		return k.runtime.Version(ctx, &runtimeapi.VersionRequest{Version: "0.1.0"})
	})
	k.step("RuntimeConfig", func(ctx context.Context) (interface{}, error) {
		return k.runtime.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
	})
	k.step("Status", func(ctx context.Context) (interface{}, error) {
		return k.runtime.Status(ctx, &runtimeapi.StatusRequest{Verbose: false})
	})
	k.step("ImageFsInfo", func(ctx context.Context) (interface{}, error) {
		return k.images.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	})
	k.step("UpdateRuntimeConfig", func(ctx context.Context) (interface{}, error) {
		return k.runtime.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{
			RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: podCIDR}},
		})
	})

	// --- the pod ---
	podConfig := k.sandboxConfig()
	if err := os.MkdirAll(podConfig.LogDirectory, 0o755); err != nil {
		return fmt.Errorf("cannot make the pod log directory: %v", err)
	}
	var podID, imageRef, containerID string
	k.step("RunPodSandbox", func(ctx context.Context) (interface{}, error) {
		r, err := k.runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig})
		if err == nil {
			podID = r.PodSandboxId
		}
		return r, err
	})
	k.step("PodSandboxStatus", func(ctx context.Context) (interface{}, error) {
		return k.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID})
	})

	imageSpec := &runtimeapi.ImageSpec{Image: applyDefaultTag(p.image), Annotations: copyMap(podConfig.Annotations)}
	pulled := false
	pull := func() {
		k.step("PullImage", func(ctx context.Context) (interface{}, error) {
			r, err := k.images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: imageSpec, SandboxConfig: podConfig})
			if err == nil {
				pulled, imageRef = true, r.ImageRef
			}
			return r, err
		})
	}
	size := func() {
		k.step("ImageStatus(size)", func(ctx context.Context) (interface{}, error) {
			return k.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: imageSpec})
		})
	}
	present := false
	if p.pullPolicy != "Always" {
		k.step("ImageStatus", func(ctx context.Context) (interface{}, error) {
			r, err := k.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: imageSpec})
			if err == nil && r.Image != nil {
				present, imageRef = true, r.Image.Id
			}
			return r, err
		})
	}
	switch {
	case p.pullPolicy == "":
		pull()
	case p.pullPolicy == "Always" || !present:
		// The size is asked for only after a pull that succeeded.
		if pull(); pulled {
			size()
		}
	}
	var uid *int64
	var username string
	k.step("ImageStatus(user)", func(ctx context.Context) (interface{}, error) {
		r, err := k.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: p.image}})
		if err == nil {
			uid, username = imageUser(r.Image)
		}
		return r, err
	})

	containerConfig, err := k.containerConfig(podConfig, imageRef, uid, username)
	if err != nil {
		return err
	}
	k.step("CreateContainer", func(ctx context.Context) (interface{}, error) {
		r, err := k.runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: podID, Config: containerConfig, SandboxConfig: podConfig,
		})
		if err == nil {
			containerID = r.ContainerId
		}
		return r, err
	})
	k.step("StartContainer", func(ctx context.Context) (interface{}, error) {
		return k.runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: containerID})
	})
	k.step("ContainerStatus", func(ctx context.Context) (interface{}, error) {
		return k.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID})
	})
	byPod := map[string]string{"io.kubernetes.pod.uid": p.uid}
	k.step("ListContainers", func(ctx context.Context) (interface{}, error) {
		return k.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{
			Filter: &runtimeapi.ContainerFilter{LabelSelector: byPod},
		})
	})
	k.step("ListPodSandbox", func(ctx context.Context) (interface{}, error) {
		return k.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
			Filter: &runtimeapi.PodSandboxFilter{LabelSelector: byPod},
		})
	})
	k.step("ContainerStats", func(ctx context.Context) (interface{}, error) {
		return k.runtime.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: containerID})
	})
	k.step("StopContainer", func(ctx context.Context) (interface{}, error) {
		return k.runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: containerID, Timeout: gracePeriod})
	})
	k.step("RemoveContainer", func(ctx context.Context) (interface{}, error) {
		return k.runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerID})
	})
	k.step("StopPodSandbox", func(ctx context.Context) (interface{}, error) {
		return k.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID})
	})
	k.step("RemovePodSandbox", func(ctx context.Context) (interface{}, error) {
		return k.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID})
	})
	return k.outErr
}

// sandboxConfig is generatePodSandboxConfig's result for the pod.
func (k *kubelet) sandboxConfig() *runtimeapi.PodSandboxConfig {
	p := k.pod
	labels := map[string]string{
		"run":                         p.name, // the pod's own label (kubectl run's)
		"io.kubernetes.pod.name":      p.name,
		"io.kubernetes.pod.namespace": p.namespace,
		"io.kubernetes.pod.uid":       p.uid,
	}
	annotations := map[string]string{
		"kubernetes.io/config.seen":   time.Now().Format(time.RFC3339Nano),
		"kubernetes.io/config.source": "api",
	}
	network := runtimeapi.NamespaceMode_POD
	if p.hostNetwork {
		network = runtimeapi.NamespaceMode_NODE
	}
	cgroupParent := p.cgroupParent
	if cgroupParent == "" {
		cgroupParent = "/kubepods/besteffort/pod" + p.uid
	}
	config := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: p.name, Namespace: p.namespace, Uid: p.uid, Attempt: 0},
		DnsConfig:    k.dnsConfig(),
		LogDirectory: filepath.Join(p.logRoot, strings.Join([]string{p.namespace, p.name, p.uid}, "_")),
		Labels:       labels,
		Annotations:  annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: cgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: namespaceOptions(network),
				Privileged:       false,
				Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
			},
			Sysctls:   map[string]string{},
			Overhead:  &runtimeapi.LinuxContainerResources{},
			Resources: k.cpuAndMemory(),
		},
	}
	if !p.hostNetwork {
		config.Hostname = p.name
	}
	return config
}

// namespaceOptions is NamespacesForPod's result: the container's pid namespace of its own, the
// pod's network and IPC, and the node's user namespace (UserNamespacesSupport on, hostUsers unset).
func namespaceOptions(network runtimeapi.NamespaceMode) *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{
		Network:       network,
		Pid:           runtimeapi.NamespaceMode_CONTAINER,
		Ipc:           runtimeapi.NamespaceMode_POD,
		UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE},
	}
}

// dnsConfig is GetPodDNS for dnsPolicy ClusterFirst (Default, the host's resolv.conf, for a
// host-network pod).
func (k *kubelet) dnsConfig() *runtimeapi.DNSConfig {
	servers, searches, options := hostResolvConf()
	if k.pod.hostNetwork {
		return &runtimeapi.DNSConfig{Servers: servers, Searches: searches, Options: options}
	}
	ns := k.pod.namespace
	clusterSearches := []string{ns + ".svc." + clusterDomain, "svc." + clusterDomain, clusterDomain}
	return &runtimeapi.DNSConfig{
		Servers:  []string{clusterDNS},
		Searches: append(clusterSearches, searches...),
		Options:  []string{"ndots:5"},
	}
}

// cpuAndMemory is calculateLinuxResources for no requests and no limits.
func (k *kubelet) cpuAndMemory() *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, CpuQuota: 0}
	if k.cgroupV2 {
		r.Unified = map[string]string{"memory.oom.group": "1"}
	}
	return r
}

// containerConfig is generateContainerConfig's result for the pod's one container.
func (k *kubelet) containerConfig(podConfig *runtimeapi.PodSandboxConfig, imageRef string, uid *int64, username string) (*runtimeapi.ContainerConfig, error) {
	p := k.pod
	podDir := filepath.Join(p.root, "pods", p.uid)
	// The kubelet-managed /etc/hosts (kubelet_pods.go ensureHostsFile).
	hosts := filepath.Join(podDir, "etc-hosts")
	containerDir := filepath.Join(podDir, "containers", containerName)
	if err := os.MkdirAll(containerDir, 0o750); err != nil {
		return nil, fmt.Errorf("cannot make the pod's directories: %v", err)
	}
	hostsContent := "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	if err := os.WriteFile(hosts, []byte(hostsContent), 0o644); err != nil {
		return nil, fmt.Errorf("cannot write %s: %v", hosts, err)
	}
	// kuberuntime makeMounts: a random id per container instance.
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	terminationLog := filepath.Join(containerDir, hex.EncodeToString(id))
	if err := os.WriteFile(terminationLog, nil, 0o666); err != nil {
		return nil, fmt.Errorf("cannot create %s: %v", terminationLog, err)
	}
	if err := os.MkdirAll(filepath.Join(podConfig.LogDirectory, containerName), 0o755); err != nil {
		return nil, fmt.Errorf("cannot make the container log directory: %v", err)
	}

	network := podConfig.Linux.SecurityContext.NamespaceOptions.Network
	sc := &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: namespaceOptions(network),
		Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
		MaskedPaths:      maskedPaths(),
		ReadonlyPaths:    []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
	}
	if uid != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *uid}
	} else if username != "" {
		sc.RunAsUsername = username
	}

	resources := k.cpuAndMemory()
	resources.OomScoreAdj = 1000
	resources.HugepageLimits = hugepageLimits()
	if k.cgroupV2 {
		// ConfigureNoSwap on cgroup v2 (the swap controller is there whenever memory is).
		resources.Unified["memory.swap.max"] = "0"
		// MemoryQoS (on by default since 1.37): no memory request, reservation policy None.
		resources.Unified["memory.min"] = "0"
		resources.Unified["memory.low"] = "0"
	}

	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: containerName, Attempt: 0},
		Image:    &runtimeapi.ImageSpec{Image: imageRef, UserSpecifiedImage: p.image},
		Command:  command,
		Envs:     serviceEnv(),
		Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/etc/hosts", HostPath: hosts},
			{ContainerPath: terminationMessagePath, HostPath: terminationLog},
		},
		Labels: map[string]string{
			"io.kubernetes.container.name": containerName,
			"io.kubernetes.pod.name":       p.name,
			"io.kubernetes.pod.namespace":  p.namespace,
			"io.kubernetes.pod.uid":        p.uid,
		},
		Annotations: map[string]string{
			"io.kubernetes.container.hash":                     "9d2e1a6c",
			"io.kubernetes.container.restartCount":             "0",
			"io.kubernetes.container.terminationMessagePath":   terminationMessagePath,
			"io.kubernetes.container.terminationMessagePolicy": "File",
			"io.kubernetes.pod.terminationGracePeriod":         strconv.Itoa(gracePeriod),
		},
		LogPath: filepath.Join(containerName, "0.log"),
		Linux:   &runtimeapi.LinuxContainerConfig{Resources: resources, SecurityContext: sc},
	}, nil
}

// serviceEnv: the "kubernetes" service's links (ClusterIP 10.96.0.1, port 443).
func serviceEnv() []*runtimeapi.KeyValue {
	pairs := [][2]string{
		{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
		{"KUBERNETES_SERVICE_PORT", "443"},
		{"KUBERNETES_SERVICE_PORT_HTTPS", "443"},
		{"KUBERNETES_PORT", "tcp://10.96.0.1:443"},
		{"KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"},
		{"KUBERNETES_PORT_443_TCP_PROTO", "tcp"},
		{"KUBERNETES_PORT_443_TCP_PORT", "443"},
		{"KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"},
	}
	envs := make([]*runtimeapi.KeyValue, 0, len(pairs))
	for _, kv := range pairs {
		envs = append(envs, &runtimeapi.KeyValue{Key: kv[0], Value: []byte(kv[1])})
	}
	return envs
}

// maskedPaths is pkg/securitycontext's defaultMaskedPaths: a fixed list, then each possible
// CPU's thermal_throttle directory that exists on this node.
func maskedPaths() []string {
	paths := []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	for _, cpu := range possibleCPUs() {
		path := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/thermal_throttle", cpu)
		if _, err := os.Stat(path); err == nil {
			paths = append(paths, path)
		}
	}
	return paths
}

// possibleCPUs: the CPUs of /sys/devices/system/cpu/possible ("0-3,8"), else 0..NumCPU-1.
func possibleCPUs() []int {
	var cpus []int
	data, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err == nil {
		for _, r := range strings.Split(strings.TrimSpace(string(data)), ",") {
			first, last, isRange := strings.Cut(r, "-")
			if !isRange {
				last = first
			}
			from, err1 := strconv.Atoi(first)
			to, err2 := strconv.Atoi(last)
			if err1 != nil || err2 != nil {
				cpus = nil
				break
			}
			for cpu := from; cpu <= to; cpu++ {
				cpus = append(cpus, cpu)
			}
		}
	}
	if cpus == nil {
		for cpu := 0; cpu < runtime.NumCPU(); cpu++ {
			cpus = append(cpus, cpu)
		}
	}
	return cpus
}

// imageUser is getImageUser: the image's uid, else its user name, else root.
func imageUser(image *runtimeapi.Image) (*int64, string) {
	if image != nil {
		if image.Uid != nil {
			uid := image.Uid.Value
			return &uid, ""
		}
		if image.Username != "" {
			return nil, image.Username
		}
	}
	return new(int64), ""
}

// applyDefaultTag: a reference with neither tag nor digest gets ":latest".
func applyDefaultTag(image string) string {
	last := image[strings.LastIndex(image, "/")+1:]
	if strings.Contains(last, ":") || strings.Contains(image, "@") {
		return image
	}
	return image + ":latest"
}

// hugepageLimits: every huge page size of the host, limited to 0 (the pod asks for none).
func hugepageLimits() []*runtimeapi.HugepageLimit {
	entries, _ := os.ReadDir("/sys/kernel/mm/hugepages")
	var sizes []uint64
	for _, e := range entries {
		kb := strings.TrimSuffix(strings.TrimPrefix(e.Name(), "hugepages-"), "kB")
		if n, err := strconv.ParseUint(kb, 10, 64); err == nil {
			sizes = append(sizes, n*1024)
		}
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	var limits []*runtimeapi.HugepageLimit
	for _, size := range sizes {
		limits = append(limits, &runtimeapi.HugepageLimit{PageSize: unitSize(size), Limit: 0})
	}
	return limits
}

// unitSize is HugePageUnitSizeFromByteSize: 2097152 -> "2MB".
func unitSize(size uint64) string {
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for size >= 1024 && i < len(units)-1 && size%1024 == 0 {
		size /= 1024
		i++
	}
	return fmt.Sprintf("%d%s", size, units[i])
}

// isCgroup2UnifiedMode: /sys/fs/cgroup is a cgroup2 file system.
func isCgroup2UnifiedMode() bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/sys/fs/cgroup", &st); err != nil {
		return false
	}
	return st.Type == 0x63677270 // CGROUP2_SUPER_MAGIC
}

// hostResolvConf: the node's nameservers, searches and options.
func hostResolvConf() (servers, searches, options []string) {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return nil, nil, nil
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			servers = append(servers, fields[1])
		case "search":
			searches = fields[1:]
		case "options":
			options = fields[1:]
		}
	}
	return servers, searches, options
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// podUID: a UUID-shaped uid derived from the name, so that reruns are recognisable.
func podUID(name string) string {
	var h [16]byte
	for i, c := range []byte(name) {
		h[i%16] = h[i%16]*31 + c
	}
	h[6] = h[6]&0x0f | 0x40
	h[8] = h[8]&0x3f | 0x80
	s := hex.EncodeToString(h[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}
