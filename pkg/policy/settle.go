package policy

import "time"

// SettleDeadline is when waiting for node evidence about a failure ends: settle after the
// later of the failure's time rounded up to the next whole second and when the controller
// first saw the failure. Kubernetes records a container's exit in whole seconds (finishedAt,
// truncated, by the node's clock), so the exit happened up to a second after the time it
// shows; and the controller may see the failure later still (its cache, its queue). Counting
// from either alone cuts the window short: evidence that reaches the API server within
// settle of the failure, as the controller sees it, is always considered. A zero time is
// unknown and counts for nothing.
func SettleDeadline(failedAt, firstSeen time.Time, settle time.Duration) time.Time {
	from := firstSeen
	if !failedAt.IsZero() {
		if up := failedAt.Truncate(time.Second).Add(time.Second); up.After(from) {
			from = up
		}
	}
	return from.Add(settle)
}
