package push

// This file is retry timing: the backoff between attempts, a device's not-before time, and
// the wake that clears it when a provider is back.

import (
	"context"
	"math/rand/v2"
	"time"
)

// wake queues uid's work now, clearing its devices' backoff: their provider is back.
func (p *Pusher) wake(uid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.users[uid]
	if u == nil {
		return
	}
	for _, d := range u.devices {
		d.attempt, d.notBefore = 0, time.Time{}
	}
	p.enqueueLocked(u)
}

func (p *Pusher) setNotBefore(uid, device string, attempt int, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.users[uid]; u != nil {
		if d := u.devices[device]; d != nil {
			d.attempt, d.notBefore = attempt, t
		}
	}
}

// backoff is the wait before attempt n (1, 2, …): doubling from min up to max, with full
// jitter in its upper half so that devices failing together do not retry together.
func backoff(n int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
