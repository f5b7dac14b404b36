package cluster

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Two creations in one workdir take turns; a waiter gives up when its context ends.
func TestLockCreationTakesTurns(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	unlock, err := lockCreation(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := lockCreation(short, dir); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while the first is held: got %v, want a deadline error", err)
	}

	got := make(chan error, 1)
	go func() {
		u, err := lockCreation(ctx, dir)
		if err == nil {
			u()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("second lock returned (%v) while the first is held", err)
	case <-time.After(200 * time.Millisecond):
	}
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("second lock after the first was released: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second lock still waiting 10 s after the first was released")
	}
}
