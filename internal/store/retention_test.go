package store

import (
	"testing"
	"time"
)

func TestConversationRetention(t *testing.T) {
	h := time.Hour
	bounded := RetentionPolicy{Default: 30 * 24 * h, GroupMin: h, GroupMax: 90 * 24 * h}
	for _, tc := range []struct {
		name   string
		own    time.Duration
		policy RetentionPolicy
		want   time.Duration
	}{
		{"no own: the operator's", 0, bounded, 30 * 24 * h},
		{"no own, operator keeps for ever", 0, RetentionPolicy{GroupMin: h}, 0},
		{"own within bounds", 2 * h, bounded, 2 * h},
		{"own though the operator keeps for ever", 2 * h, RetentionPolicy{GroupMin: h}, 2 * h},
		{"own longer than the operator's", 60 * 24 * h, bounded, 60 * 24 * h},
		{"own below a raised minimum", 30 * time.Minute, bounded, h},
		{"own above a lowered maximum", 365 * 24 * h, bounded, 90 * 24 * h},
		{"no maximum", 3650 * 24 * h, RetentionPolicy{GroupMin: h}, 3650 * 24 * h},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Conversation{RetentionMS: tc.own.Milliseconds()}
			if got := ConversationRetention(c, tc.policy); got != tc.want {
				t.Errorf("ConversationRetention = %v, want %v", got, tc.want)
			}
			now := time.UnixMilli(1_800_000_000_000)
			if cut, kept := ConversationCutoff(c, tc.policy, now), tc.policy.KeptAfter(now); cut > kept {
				t.Errorf("cutoff %d is after KeptAfter %d: a read would keep an expired message", cut, kept)
			}
		})
	}
}

func TestRetentionPolicyAllows(t *testing.T) {
	p := RetentionPolicy{GroupMin: time.Hour, GroupMax: 24 * time.Hour}
	for d, want := range map[time.Duration]bool{time.Minute: false, time.Hour: true, 24 * time.Hour: true, 25 * time.Hour: false} {
		if got := p.Allows(d); got != want {
			t.Errorf("Allows(%v) = %v, want %v", d, got, want)
		}
	}
	if !(RetentionPolicy{GroupMin: time.Hour}).Allows(1000 * 24 * time.Hour) {
		t.Error("no maximum refused a long retention")
	}
}
