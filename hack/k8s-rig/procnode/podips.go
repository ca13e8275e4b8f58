package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// podIPs hands out one address per pod from the node's pod CIDR, a range of
// the loopback network 127.0.0.0/8: Linux routes all of it to lo, so a
// process binds and dials any of these addresses without root, an
// interface alias or a network namespace. Pods get distinct IPs as on a
// real node (two pods may listen on the same port at their own IPs, and a
// peer dials the IP the pod advertises), while a server bound to all
// interfaces (":port") still answers on every one of them.
//
// Addresses are handed out round-robin, so an IP freed by a pod that ended
// is the last to be reused.
type podIPs struct {
	cidr  string
	first uint32 // first usable address
	size  uint32 // usable addresses

	mu   sync.Mutex
	next uint32 // offset of the next address to try
	used map[uint32]types.UID
}

// newPodIPs makes the allocator of an IPv4 CIDR inside 127.0.0.0/8 with at
// least 2 usable addresses. The network address, the broadcast address and
// 127.0.0.1 (the node's own) are never handed out.
func newPodIPs(cidr string) (*podIPs, error) {
	ip, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR: %w", err)
	}
	ones, bits := n.Mask.Size()
	if ip.To4() == nil || bits != 32 {
		return nil, fmt.Errorf("pod CIDR %s: want an IPv4 range", cidr)
	}
	if !n.IP.IsLoopback() || ones < 8 {
		return nil, fmt.Errorf("pod CIDR %s: must lie inside 127.0.0.0/8 (the loopback network, which needs no interface set up)", cidr)
	}
	if ones > 30 {
		return nil, fmt.Errorf("pod CIDR %s: too small (at most /30)", cidr)
	}
	a := &podIPs{
		cidr:  n.String(),
		first: binary.BigEndian.Uint32(n.IP.To4()) + 1,
		size:  1<<(32-ones) - 2,
		used:  map[uint32]types.UID{},
	}
	if node := binary.BigEndian.Uint32(net.ParseIP(localIP).To4()); node >= a.first && node < a.first+a.size {
		a.used[node-a.first] = "" // the node's address, held for good
	}
	return a, nil
}

// errNoPodIP: every address of the pod CIDR is taken.
var errNoPodIP = errors.New("no free address in the pod CIDR")

// acquire gives pod uid an address.
func (a *podIPs) acquire(uid types.UID) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := uint32(0); i < a.size; i++ {
		off := (a.next + i) % a.size
		if _, taken := a.used[off]; taken {
			continue
		}
		a.used[off] = uid
		a.next = (off + 1) % a.size
		return a.ipAt(off), nil
	}
	return "", fmt.Errorf("%s: %w", a.cidr, errNoPodIP)
}

// release frees ip if pod uid holds it.
func (a *podIPs) release(ip string, uid types.UID) {
	p := net.ParseIP(ip).To4()
	if p == nil {
		return
	}
	off := binary.BigEndian.Uint32(p) - a.first
	a.mu.Lock()
	defer a.mu.Unlock()
	if owner, ok := a.used[off]; ok && owner == uid && uid != "" {
		delete(a.used, off)
	}
}

func (a *podIPs) ipAt(off uint32) string {
	b := make(net.IP, 4)
	binary.BigEndian.PutUint32(b, a.first+off)
	return b.String()
}
