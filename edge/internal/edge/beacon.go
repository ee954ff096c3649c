package edge

import (
	"encoding/json"
	"net/http"
)

// beaconSnippet posts the Navigation Timing entry once the page has loaded
// (the page-load time Configanator measured).
const beaconSnippet = `<script>addEventListener("load",function(){setTimeout(function(){` +
	`var n=performance.getEntriesByType("navigation")[0];if(n&&navigator.sendBeacon)` +
	`navigator.sendBeacon("` + BeaconPath + `",JSON.stringify(n))},0)})</script>`

// navigationTiming is the part of a PerformanceNavigationTiming we read.
type navigationTiming struct {
	StartTime    float64 `json:"startTime"`
	LoadEventEnd float64 `json:"loadEventEnd"`
	Name         string  `json:"name"`
}

// beacon accepts one bounded Navigation Timing JSON body and reports its
// page-load time (kind "pageload") with the connection's decision.
func (s *Server) beacon(w http.ResponseWriter, r *http.Request) {
	var nt navigationTiming
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBeaconBytes)
	if err := json.NewDecoder(body).Decode(&nt); err != nil {
		http.Error(w, "bad beacon: "+err.Error(), http.StatusBadRequest)
		return
	}
	plt := nt.LoadEventEnd - nt.StartTime
	if nt.LoadEventEnd <= 0 || plt < 0 || plt > 3600e3 {
		http.Error(w, "bad beacon: loadEventEnd missing or out of range", http.StatusBadRequest)
		return
	}
	if s.sink != nil {
		rec := s.baseRecord(r, "pageload")
		rec.PLTMs = &plt
		s.sink.Add(rec)
	}
	w.WriteHeader(http.StatusNoContent)
}
