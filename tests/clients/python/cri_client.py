#!/usr/bin/env python3
"""A CRI client on gRPC C-core (grpcio), to check cri-bridge and runtimes against a client that
is not tonic/hyper: C-core picks its own HTTP/2 framing and its own :authority for unix sockets.

It runs one pod session, one RPC a step, and prints one JSON line per step:
    {"step": "Exec", "code": "OK", "message": "", "response": {...}}
A failed step is reported and the session goes on, so a test sees every step's outcome. The exit
status is 0 whenever the session ran, and non-zero only if it could not (bad arguments, no stubs,
no socket). Stubs come from tests/clients/python/setup.sh.
"""

import argparse
import importlib
import json
import os
import stat
import sys
import threading
import time

try:
    import grpc
    from google.protobuf.json_format import MessageToDict
except ImportError as e:
    sys.exit(f"cri_client.py: {e}: run it with target/clients/venv/bin/python (made by tests/clients/python/setup.sh)")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
GEN = os.environ.get("CRI_CLIENT_GEN", os.path.join(REPO, "target", "clients", "python", "gen"))

# setup.sh compiles proto/<version>/api.proto as cri_<version>.proto (see there why).
VERSIONS = ("v1", "v1alpha2", "v1alpha1")

NAMESPACE = "cri-bridge-test"
SESSION_LABEL = "cri-bridge.test/session"
# How long to wait for our container's CREATED and STARTED events on the v1 event stream.
EVENTS_WAIT_S = 10.0
# How long to give the server to subscribe the event stream before we create the container: the
# call is sent at once, but the server registers the subscriber in its own time, and an event
# emitted before that is never delivered.
EVENTS_SUBSCRIBE_S = 0.5


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", required=True, help="the CRI unix socket")
    parser.add_argument("--version", required=True, choices=VERSIONS, help="the CRI version to speak")
    parser.add_argument("--image", required=True, help="an image already present in the runtime")
    parser.add_argument("--name", required=True, help="pod and container name, pod uid, session label")
    parser.add_argument("--timeout", type=float, default=30.0, help="deadline of each unary RPC, seconds")
    parser.add_argument("--idle", type=float, default=0.0,
                        help="seconds to pause after Version with no call open, and (v1) again with only the event "
                             "stream open: to meet a server's idle timeout and keepalive pings")
    return parser.parse_args()


def load_stubs(version):
    if not os.path.isdir(GEN):
        sys.exit(f"cri_client.py: no generated stubs in {GEN}: run tests/clients/python/setup.sh")
    sys.path.insert(0, GEN)
    try:
        return importlib.import_module(f"cri_{version}_pb2"), importlib.import_module(f"cri_{version}_pb2_grpc")
    except ImportError as e:
        sys.exit(f"cri_client.py: cannot import the {version} stubs from {GEN} ({e}): run tests/clients/python/setup.sh")


def report(step, code, message, response):
    body = response if response is None or isinstance(response, dict) else MessageToDict(
        response, preserving_proto_field_name=True)
    print(json.dumps({"step": step, "code": code, "message": message, "response": body}), flush=True)


def call(step, rpc, request, timeout):
    """One unary RPC as one step; returns the response, or None when it failed."""
    try:
        response = rpc(request, timeout=timeout)
    except grpc.RpcError as e:
        report(step, e.code().name, e.details() or "", None)
        return None
    report(step, "OK", "", response)
    return response


class EventStream:
    """The v1 GetContainerEvents stream, read in a thread while the session goes on."""

    def __init__(self, pb, stub):
        self._cond = threading.Condition()
        self.events = []  # every event, ours or not: our container id is known only later
        self.error = None  # the RpcError that ended the stream, unless we cancelled it
        self.done = False
        self._cancelled = False
        # No deadline: the stream lives as long as the session and is ended by cancel().
        self._call = stub.GetContainerEvents(pb.GetEventsRequest())
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for event in self._call:
                with self._cond:
                    self.events.append(event)
                    self._cond.notify_all()
        except grpc.RpcError as e:
            with self._cond:
                if not self._cancelled:
                    self.error = e
        with self._cond:
            self.done = True
            self._cond.notify_all()

    def wait(self, predicate, seconds):
        """Waits until predicate() holds or the stream ended or `seconds` passed."""
        deadline = time.monotonic() + seconds
        with self._cond:
            while not predicate() and not self.done:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)

    def cancel(self):
        with self._cond:
            self._cancelled = True
        self._call.cancel()


def build_pod_config(pb, version, name):
    metadata = pb.PodSandboxMetadata(name=name, uid=name, namespace=NAMESPACE, attempt=0)
    # The tests run without CNI, so the pod must share the host's network namespace.
    if version == "v1alpha1":
        namespaces = pb.NamespaceOption(host_network=True)
    else:
        namespaces = pb.NamespaceOption(network=pb.NODE)
    linux = pb.LinuxPodSandboxConfig(security_context=pb.LinuxSandboxSecurityContext(namespace_options=namespaces))
    return pb.PodSandboxConfig(metadata=metadata, labels={SESSION_LABEL: name}, linux=linux)


def run_session(pb, stub, version, image, name, timeout, idle):
    pod_config = build_pod_config(pb, version, name)
    # Versions' messages agree on every field used below.
    call("Version", stub.Version, pb.VersionRequest(version="0.1.0"), timeout)
    time.sleep(idle)
    pod = call("RunPodSandbox", stub.RunPodSandbox, pb.RunPodSandboxRequest(config=pod_config), timeout)
    pod_id = pod.pod_sandbox_id if pod else ""

    events = None
    if version == "v1":
        events = EventStream(pb, stub)
        # Also returns at once when the stream failed straight away (UNIMPLEMENTED, INTERNAL).
        events.wait(lambda: False, EVENTS_SUBSCRIBE_S + idle)

    container_config = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name, attempt=0),
        image=pb.ImageSpec(image=image),
        command=["/bin/sleep", "3600"],
        labels={SESSION_LABEL: name},
    )
    created = call("CreateContainer", stub.CreateContainer, pb.CreateContainerRequest(
        pod_sandbox_id=pod_id, config=container_config, sandbox_config=pod_config), timeout)
    container_id = created.container_id if created else ""
    call("StartContainer", stub.StartContainer, pb.StartContainerRequest(container_id=container_id), timeout)
    # Only the URL is wanted: the streaming server behind it is not part of the CRI's gRPC.
    call("Exec", stub.Exec, pb.ExecRequest(container_id=container_id, cmd=["/bin/sh"], stdout=True), timeout)

    if events is not None:
        report_events(pb, events, container_id)

    call("StopContainer", stub.StopContainer, pb.StopContainerRequest(container_id=container_id, timeout=1), timeout)
    call("RemoveContainer", stub.RemoveContainer, pb.RemoveContainerRequest(container_id=container_id), timeout)
    call("StopPodSandbox", stub.StopPodSandbox, pb.StopPodSandboxRequest(pod_sandbox_id=pod_id), timeout)
    call("RemovePodSandbox", stub.RemovePodSandbox, pb.RemovePodSandboxRequest(pod_sandbox_id=pod_id), timeout)


def report_events(pb, events, container_id):
    wanted = {pb.CONTAINER_CREATED_EVENT, pb.CONTAINER_STARTED_EVENT}

    def ours():
        return [e.container_event_type for e in events.events if container_id and e.container_id == container_id]

    events.wait(lambda: wanted <= set(ours()), EVENTS_WAIT_S)
    events.cancel()
    names = [pb.ContainerEventType.Name(t) for t in ours()]
    # events_total counts every container's events: a runtime may also send the sandbox's, and
    # containerd 1.7 hands a new subscriber events that queued up before it subscribed.
    response = {"container_id": container_id, "event_types": names, "events_total": len(events.events)}
    if events.error is not None:
        report("GetContainerEvents", events.error.code().name, events.error.details() or "", None)
    else:
        report("GetContainerEvents", "OK", "", response)


def main():
    args = parse_args()
    path = os.path.abspath(args.socket)
    try:
        is_socket = stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError as e:
        sys.exit(f"cri_client.py: cannot stat {path}: {e}")
    if not is_socket:
        sys.exit(f"cri_client.py: {path} is not a unix socket")
    pb, pb_grpc = load_stubs(args.version)

    # "unix://" + an absolute path, and no options: the :authority is whatever C-core sends by
    # default for such a target, which is what this client exists to exercise.
    with grpc.insecure_channel("unix://" + path) as channel:
        run_session(pb, pb_grpc.RuntimeServiceStub(channel), args.version, args.image, args.name, args.timeout,
                    args.idle)


if __name__ == "__main__":
    main()
