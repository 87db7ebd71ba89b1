//go:build cri_v1alpha2

package main

import runtimeapi "cribridge/clients/cri/v1alpha2"

// apiVersion is sent in VersionRequest (as crictl does) and names the binary in diagnostics.
const apiVersion = "v1alpha2"

// hostNetwork: since v1alpha2 each namespace has a mode, NODE being the host's.
func hostNetwork() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}
}
