//go:build cri_v1alpha1

package main

import runtimeapi "cribridge/clients/cri/v1alpha1"

// apiVersion is sent in VersionRequest (as crictl does) and names the binary in diagnostics.
const apiVersion = "v1alpha1"

// hostNetwork: v1alpha1 predates namespace modes; host namespaces were plain booleans.
func hostNetwork() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{HostNetwork: true}
}
