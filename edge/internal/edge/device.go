package edge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// DeviceMapSchema is the "schema" value of a device map file.
const DeviceMapSchema = "tailor.device-map/v1"

// UnknownDevice is the device class of a fingerprint the map does not know.
const UnknownDevice = "unknown"

// maxDeviceMapBytes bounds a device map file.
const maxDeviceMapBytes = 4 << 20

// DeviceMap maps a JA4 fingerprint to a device class ("desktop", "android",
// "ios", ... as in the scenarios' client attributes). Lookup tries the full
// JA4 first, then its first section (JA4_a, e.g. "t13d1516h2"). Immutable
// after LoadDeviceMap; a nil map answers UnknownDevice.
type DeviceMap struct {
	full  map[string]string
	short map[string]string
}

// Device returns the class of fingerprint ja4, or UnknownDevice.
func (m *DeviceMap) Device(ja4 string) string {
	if m == nil || ja4 == "" {
		return UnknownDevice
	}
	if d, ok := m.full[ja4]; ok {
		return d
	}
	a, _, _ := strings.Cut(ja4, "_")
	if d, ok := m.short[a]; ok {
		return d
	}
	return UnknownDevice
}

// Len is the number of entries (both sections).
func (m *DeviceMap) Len() int {
	if m == nil {
		return 0
	}
	return len(m.full) + len(m.short)
}

// LoadDeviceMap reads a device map file:
//
//	{"schema": "tailor.device-map/v1", "doc": "optional free text",
//	 "ja4":   {"t13d1516h2_8daaf6152771_02713d6af862": "desktop"},
//	 "ja4_a": {"q13d0312h3": "android"}}
//
// Errors name the field and the reason.
func LoadDeviceMap(path string) (*DeviceMap, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --device-map: %v", ErrConfig, err)
	}
	if st.Size() > maxDeviceMapBytes {
		return nil, fmt.Errorf("%w: --device-map %s: %d bytes, limit %d", ErrConfig, path, st.Size(), maxDeviceMapBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --device-map: %v", ErrConfig, err)
	}
	m, err := ParseDeviceMap(data)
	if err != nil {
		return nil, fmt.Errorf("%w: --device-map %s: %w", ErrConfig, path, err)
	}
	return m, nil
}

// ParseDeviceMap validates and indexes a device map document.
func ParseDeviceMap(data []byte) (*DeviceMap, error) {
	var doc struct {
		Schema string            `json:"schema"`
		Doc    string            `json:"doc"`
		JA4    map[string]string `json:"ja4"`
		JA4A   map[string]string `json:"ja4_a"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("device map field (root): %v", err)
	}
	if doc.Schema != DeviceMapSchema {
		return nil, fmt.Errorf("device map field schema: %q, want %q", doc.Schema, DeviceMapSchema)
	}
	check := func(field string, m map[string]string, sections int) error {
		for k, v := range m {
			if strings.Count(k, "_") != sections-1 || len(k) < 10 {
				return fmt.Errorf("device map field %s[%q]: not a JA4%s fingerprint", field, k, map[int]string{1: "_a", 3: ""}[sections])
			}
			if v == "" || v == UnknownDevice {
				return fmt.Errorf("device map field %s[%q]: device class must be a non-empty name other than %q", field, k, UnknownDevice)
			}
			if !telemetry.ValidToken(v, telemetry.MaxDevice) {
				return fmt.Errorf("device map field %s[%q]: device class %q is not printable ASCII (no spaces) of at most %d bytes", field, k, v, telemetry.MaxDevice)
			}
		}
		return nil
	}
	if err := check("ja4", doc.JA4, 3); err != nil {
		return nil, err
	}
	if err := check("ja4_a", doc.JA4A, 1); err != nil {
		return nil, err
	}
	return &DeviceMap{full: doc.JA4, short: doc.JA4A}, nil
}
