// Command tailor-link is a userspace (mahimahi-style) link emulator between
// two network namespaces over TUN devices. See README.md.
package main

import (
	"os"

	"github.com/tailor-project/tailor/edge/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
