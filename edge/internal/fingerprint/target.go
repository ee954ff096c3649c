package fingerprint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// ErrNotOwnHost is returned for a target that is neither loopback, private (RFC 1918, ULA) nor
// assigned to this host, when the operator did not state that they own it.
var ErrNotOwnHost = errors.New("not this host's own address")

// Target is the address the probe measures and the name it sends as SNI and Host.
type Target struct {
	Addr netip.AddrPort
	Name string // the host as given (a name or an address literal)
}

// ParseTarget splits HOST[:PORT] (port 443 by default; [v6]:port for IPv6) and resolves a name to
// its first address, IPv4 first (the raw measurements speak IPv4 only).
func ParseTarget(ctx context.Context, hostport string) (Target, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		host, portStr = hostport, "443"
		if a, perr := netip.ParseAddr(hostport); perr == nil && a.Is6() {
			host = a.String()
		}
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return Target{}, fmt.Errorf("target %q: port must be 1..65535", hostport)
	}
	if host == "" {
		return Target{}, fmt.Errorf("target %q: empty host", hostport)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return Target{Addr: netip.AddrPortFrom(a.Unmap(), uint16(port)), Name: host}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return Target{}, fmt.Errorf("target %q: cannot resolve %s: %v", hostport, host, err)
	}
	best := addrs[0]
	for _, a := range addrs {
		if a.Unmap().Is4() {
			best = a
			break
		}
	}
	return Target{Addr: netip.AddrPortFrom(best.Unmap(), uint16(port)), Name: host}, nil
}

// CheckOwnHost refuses addresses outside the operator's reach unless iOwnIt: the probe withholds
// acknowledgements and leaves half-open connections, which is fine on one's own servers only. Allowed
// without the flag: loopback, and addresses inside a prefix assigned to one of this host's interfaces
// (the host itself and what sits on its directly connected links, e.g. a namespace behind a veth). A private
// (RFC 1918/ULA) address reached through a gateway is someone's network, not necessarily the operator's.
func CheckOwnHost(a netip.Addr, local []netip.Prefix, iOwnIt bool) error {
	a = a.Unmap()
	if iOwnIt || a.IsLoopback() {
		return nil
	}
	for _, p := range local {
		if p.Contains(a) {
			return nil
		}
	}
	return fmt.Errorf("target %s: %w (neither loopback nor on a link of this host); pass --i-own-this-host to "+
		"probe a server you operate", a, ErrNotOwnHost)
}

// LocalPrefixes lists the prefixes assigned to this host's interfaces (in the current namespace): the
// addresses with their on-link subnets.
func LocalPrefixes() []netip.Prefix {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, ia := range ifaddrs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil {
			out = append(out, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked())
		}
	}
	return out
}

// routeInterface is the interface that carries packets to dst and the source address used: a
// connected UDP socket makes the kernel choose the route without sending anything. A destination
// that is one of our own addresses goes over loopback.
func routeInterface(dst netip.Addr) (*net.Interface, netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return nil, netip.Addr{}, fmt.Errorf("no route to %s: %w", dst, err)
	}
	src := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	c.Close()
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, src, err
	}
	viaLoopback := dst.IsLoopback() || src == dst
	for i := range ifs {
		if viaLoopback {
			if ifs[i].Flags&net.FlagLoopback != 0 {
				return &ifs[i], src, nil
			}
			continue
		}
		addrs, _ := ifs[i].Addrs()
		for _, ia := range addrs {
			if p, err := netip.ParsePrefix(ia.String()); err == nil && p.Addr().Unmap() == src {
				return &ifs[i], src, nil
			}
		}
	}
	return nil, src, fmt.Errorf("no interface holds the source address %s for %s", src, dst)
}
