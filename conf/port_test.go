package conf

import "testing"

func TestPortRange(t *testing.T) {
	tests := []struct {
		r       PortRange
		port    uint16
		any, in bool
	}{
		{PortRange{}, 0, true, true},
		{PortRange{}, 1, true, true},
		{PortRange{}, 65535, true, true},
		{PortRange{443, 443}, 443, false, true},
		{PortRange{443, 443}, 442, false, false},
		{PortRange{443, 443}, 444, false, false},
		{PortRange{443, 443}, 0, false, false},
		{PortRange{8000, 8999}, 8000, false, true},
		{PortRange{8000, 8999}, 8999, false, true},
		{PortRange{8000, 8999}, 7999, false, false},
		{PortRange{8000, 8999}, 9000, false, false},
		{PortRange{1, 65535}, 65535, false, true},
		{PortRange{1, 65535}, 0, false, false},
	}
	for _, tt := range tests {
		if got := tt.r.Any(); got != tt.any {
			t.Errorf("%+v.Any() = %v, want %v", tt.r, got, tt.any)
		}
		if got := tt.r.Contains(tt.port); got != tt.in {
			t.Errorf("%+v.Contains(%d) = %v, want %v", tt.r, tt.port, got, tt.in)
		}
	}
}

func TestPortRangeString(t *testing.T) {
	for r, want := range map[PortRange]string{
		{}:           "",
		{443, 443}:   "443",
		{8000, 8999}: "8000-8999",
		{1, 65535}:   "1-65535",
	} {
		if got := r.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", r, got, want)
		}
	}
}
