// Package config holds tailor-link's configuration: a JSON file and flags
// fill the same File (nil = not set), and Resolve validates it into a
// Config before anything is started.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// ErrInvalid prefixes every validation error.
var ErrInvalid = errors.New("invalid config")

// Dir holds the settings of one direction (down = server→client,
// up = client→server). Unset fields fall back to the top-level value.
type Dir struct {
	RateMbit     *float64 `json:"rate_mbit"`     // fixed rate; default unlimited
	Trace        *string  `json:"trace"`         // mahimahi trace file; default none
	DelayMS      *float64 `json:"delay_ms"`      // one-way delay; default top-level delay_ms
	Loss         *float64 `json:"loss"`          // i.i.d. loss in [0,1); default 0
	QueuePackets *int     `json:"queue_packets"` // droptail limit; default top-level
	QueueBytes   *int     `json:"queue_bytes"`   // droptail limit; default top-level
}

// File is the JSON config (and the flag target).
type File struct {
	Down         Dir      `json:"down"`          // server→client settings
	Up           Dir      `json:"up"`            // client→server settings
	DelayMS      *float64 `json:"delay_ms"`      // one-way delay, both directions; default 0
	QueuePackets *int     `json:"queue_packets"` // both directions; default 1000 if no limit is set
	QueueBytes   *int     `json:"queue_bytes"`   // both directions; default none
	Seed         *uint64  `json:"seed"`          // loss RNG seed; default 1
	Stats        string   `json:"stats"`         // JSON stats file written at exit; default none
	SrvNS        string   `json:"srv_ns"`        // server namespace name; required (run mode creates it)
	CliNS        string   `json:"cli_ns"`        // client namespace name; required (run mode creates it)
	SrvIP        string   `json:"srv_ip"`        // server TUN address; default 10.231.0.1
	CliIP        string   `json:"cli_ip"`        // client TUN address; default 10.231.0.2
	SrvDev       string   `json:"srv_dev"`       // server TUN name; default tl-s
	CliDev       string   `json:"cli_dev"`       // client TUN name; default tl-c
	RouteOpts    string   `json:"route_opts"`    // appended to the server route to the client; default none
	MTU          *int     `json:"mtu"`           // TUN MTU; default 1500
	FIFOPrio     *int     `json:"fifo_prio"`     // SCHED_FIFO priority of the link thread; default 50, 0 = off
	// TraceFromFirstPacket starts trace clocks at each direction's first
	// packet instead of at link start; default false.
	TraceFromFirstPacket bool `json:"trace_from_first_packet"`
}

// Load reads a JSON config file; unknown fields are errors.
func Load(path string, f *File) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: config file: %v", ErrInvalid, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(f); err != nil {
		return fmt.Errorf("%w: config file %s: %v", ErrInvalid, path, err)
	}
	return nil
}
