package edge

import (
	"fmt"

	"github.com/tailor-project/tailor/edge/internal/bus"
	"github.com/tailor-project/tailor/edge/internal/rules"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// setupBus (--bus): the table keys, the cached tables (loaded before the
// bus is contacted), the connection (which does not wait for the server)
// and the telemetry sink.
func (s *Server) setupBus() error {
	keys, err := rules.LoadTableKeys(s.cfg.TablePubKey)
	if err != nil {
		return fmt.Errorf("%w: --table-pubkey: %v", ErrConfig, err)
	}
	s.busTables = &bus.Tables{Keys: keys, Reg: s.reg, CacheDir: s.cfg.TableCache, Log: s.Log, Prefix: "edge: bus: "}
	if err := s.busTables.LoadCache(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	nc, err := bus.Connect(bus.Options{URLs: s.cfg.Bus, User: s.cfg.BusUser, PasswordFile: s.cfg.BusPasswordFile,
		CAFile: s.cfg.BusCA, Name: "tailor-edge " + s.cfg.Source, Log: s.Log})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	pub, err := bus.NewPublisher(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	s.nc = nc
	s.sink = &telemetry.BusSink{Pub: pub, Pop: s.cfg.Pop, Source: s.cfg.Source, Partitions: s.busTables.Partitions,
		PartitionOf: bus.Partition, LimitBytes: s.cfg.TelemetryBufferBytes, Log: s.Log}
	return nil
}

func (s *Server) closeBus() {
	if s.nc != nil {
		s.nc.Close()
	}
}

// TableSource is where the tables in force came from with --bus: "cache",
// "bus" or "none" ("" without --bus).
func (s *Server) TableSource() string {
	if s.busTables == nil {
		return ""
	}
	return s.busTables.Source()
}

// BusTables is the --bus table watcher (nil without --bus).
func (s *Server) BusTables() *bus.Tables { return s.busTables }
