// Stands in for sigs.k8s.io/iptables-wrappers when tools/build-kubelets.sh builds Kubernetes
// 1.38+: the module proxy does not serve that module. See pkg/iptables/none.go.
module sigs.k8s.io/iptables-wrappers

go 1.24
