// Package iptables has the API the kubelet uses from sigs.k8s.io/iptables-wrappers/pkg/iptables
// and finds no iptables on any system: NewBestEffort returns no client, so the kubelet logs
// "No iptables support on this system" and sets up no chain, as on a host with nftables only.
// Only tools/build-kubelets.sh uses it (the module proxy does not serve the real module).
package iptables

import (
	"context"
	"errors"
	"time"
)

// Chain names an iptables chain.
type Chain string

// Table names an iptables table.
type Table string

// Protocol is IPv4 or IPv6.
type Protocol string

// RulePosition says where EnsureRule puts a rule.
type RulePosition string

// Mode says which iptables binary to use.
type Mode string

// The names the kubelet uses.
const (
	TableFilter Table = "filter"
	TableNAT    Table = "nat"
	TableMangle Table = "mangle"

	ChainInput  Chain = "INPUT"
	ChainOutput Chain = "OUTPUT"

	Prepend RulePosition = "-I"
	Append  RulePosition = "-A"

	ProtocolIPv4 Protocol = "IPv4"
	ProtocolIPv6 Protocol = "IPv6"

	UseInstalledMode Mode = "installed"
)

// ErrNoIptables is what every method returns.
var ErrNoIptables = errors.New("no iptables support (sigs.k8s.io/iptables-wrappers stand-in)")

// Interface is an iptables client of one protocol.
type Interface interface {
	EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error)
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error)
	IsIPv6() bool
	Protocol() Protocol
	Monitor(ctx context.Context, canary Chain, tables []Table, reloadFunc func(), interval time.Duration)
}

// NewBestEffort returns a client per protocol that iptables supports here: none.
func NewBestEffort(_ context.Context, _ Mode) map[Protocol]Interface {
	return map[Protocol]Interface{}
}
