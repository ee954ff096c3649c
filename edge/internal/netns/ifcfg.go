package netns

import (
	"net/netip"
	"strconv"
)

// Addressing documents the fixed addresses inside every namespace pair:
// the server TUN has ServerIP, the client TUN has ClientIP, each with a
// /32 peer route to the other. Pairs are isolated, so they can repeat.
const (
	ServerIP = "10.231.0.1"
	ClientIP = "10.231.0.2"
)

// TUNConfig describes one end of the link.
type TUNConfig struct {
	NS, Dev     string
	Local, Peer netip.Addr
	MTU         int
	RouteOpts   []string // appended to the route to Peer, e.g. initcwnd 10
}

// Configure assigns the point-to-point address, brings the device up and
// (re)writes the peer route with RouteOpts.
func Configure(c TUNConfig) error {
	local, peer := c.Local.String(), c.Peer.String()
	if err := ip("-n", c.NS, "addr", "add", local, "peer", peer, "dev", c.Dev); err != nil {
		return err
	}
	if err := ip("-n", c.NS, "link", "set", c.Dev, "mtu", strconv.Itoa(c.MTU), "up"); err != nil {
		return err
	}
	if len(c.RouteOpts) == 0 {
		return nil
	}
	args := append([]string{"-n", c.NS, "route", "replace", peer, "dev", c.Dev, "src", local}, c.RouteOpts...)
	return ip(args...)
}
