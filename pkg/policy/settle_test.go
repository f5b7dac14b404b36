package policy

import (
	"testing"
	"time"
)

func TestSettleDeadline(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for name, tc := range map[string]struct {
		failedAt, firstSeen time.Time
		settle              time.Duration
		want                time.Time
	}{
		// The exit shows as 12:00:00 and happened before 12:00:01: the window runs from then.
		"a whole-second exit seen at once":     {at(0), at(50), time.Second, at(2000)},
		"seen late: from the sighting":         {at(0), at(1700), time.Second, at(2700)},
		"an exit time with a fraction":         {at(400), at(450), time.Second, at(2000)},
		"no exit time: from the sighting":      {time.Time{}, at(300), time.Second, at(1300)},
		"no settle: still up to the exit":      {at(0), at(50), 0, at(1000)},
		"a longer window":                      {at(0), at(100), 5 * time.Second, at(6000)},
		"the sighting exactly at the rounding": {at(0), at(1000), time.Second, at(2000)},
	} {
		if got := SettleDeadline(tc.failedAt, tc.firstSeen, tc.settle); !got.Equal(tc.want) {
			t.Errorf("%s: %s, want %s", name, got.Format("15:04:05.000"), tc.want.Format("15:04:05.000"))
		}
	}
}
