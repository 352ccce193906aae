package chat

import (
	"slices"
	"testing"
	"time"
)

func TestTypingLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at      time.Duration
		conv    string
		started bool
		want    bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"one started per 3 s", []step{{0, "c", true, true}, {time.Second, "c", true, false}, {2999 * time.Millisecond, "c", true, false}, {3 * time.Second, "c", true, true}}},
		{"a stopped after a started always", []step{{0, "c", true, true}, {10 * time.Millisecond, "c", false, true}, {20 * time.Millisecond, "c", false, false}}},
		{"a stopped with nothing standing", []step{{0, "c", false, false}}},
		{"a stopped after the started expired", []step{{0, "c", true, true}, {6 * time.Second, "c", false, false}}},
		{"a started after a stopped waits the 3 s", []step{{0, "c", true, true}, {time.Second, "c", false, true}, {2 * time.Second, "c", true, false}, {3 * time.Second, "c", true, true}}},
		{"conversations apart", []step{{0, "a", true, true}, {0, "b", true, true}, {time.Second, "a", true, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l TypingLimiter
			for i, s := range tc.steps {
				if got := l.Allow(s.conv, s.started, t0.Add(s.at)); got != s.want {
					t.Fatalf("step %d (%+v): Allow = %v", i, s, got)
				}
			}
		})
	}
}

func TestTypingLimiterStandingAndBound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var l TypingLimiter
	l.Allow("a", true, t0)
	l.Allow("b", true, t0)
	l.Allow("b", false, t0.Add(time.Second))
	if got := l.Standing(t0.Add(time.Second)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Standing = %q, want [a]", got)
	}
	if got := l.Standing(t0.Add(6 * time.Second)); len(got) != 0 {
		t.Fatalf("Standing after 6 s = %q, want none", got)
	}
	for i := range 1000 { // each in its own second: the old ones are forgotten
		l.Allow(string(rune('A'+i%26))+time.Duration(i).String(), true, t0.Add(time.Duration(i)*time.Second))
	}
	if len(l.last) > maxTypingSpells+1 {
		t.Fatalf("the limiter keeps %d spells, want at most %d", len(l.last), maxTypingSpells+1)
	}
}
