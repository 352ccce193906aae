package hub

import (
	"slices"
	"testing"
	"time"
)

func TestEarliest(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) typer { return typer{since: t0.Add(time.Duration(s) * time.Second)} }
	for _, tc := range []struct {
		name   string
		typers map[string]typer
		n      int
		want   []string
	}{
		{"none", nil, 5, []string{}},
		{"fewer than n", map[string]typer{"b": at(2), "a": at(1)}, 5, []string{"a", "b"}},
		{"the first n by start", map[string]typer{"f": at(0), "e": at(1), "d": at(2), "c": at(3), "b": at(4), "a": at(5), "g": at(6)}, 5, []string{"f", "e", "d", "c", "b"}},
		{"ties by id", map[string]typer{"z": at(1), "y": at(1), "x": at(1)}, 2, []string{"x", "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := earliest(tc.typers, tc.n); !slices.Equal(got, tc.want) || got == nil {
				t.Fatalf("earliest = %q, want %q", got, tc.want)
			}
		})
	}
}
