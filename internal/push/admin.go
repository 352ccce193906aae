package push

import (
	"context"
	"fmt"
	"time"

	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/protocol"
)

// Validator is implemented by a provider that can tell a token it will never accept
// (a Web Push endpoint on a private address) at registration time.
type Validator interface {
	Validate(token string) error
}

// Check reports why a device's registration with provider could not be pushed to, or nil.
func (p *Pusher) Check(provider, token string) error {
	prov := p.o.Providers[provider]
	if prov == nil {
		return fmt.Errorf("provider %s is not configured on this server", provider)
	}
	if v, ok := prov.(Validator); ok {
		return v.Validate(token)
	}
	return nil
}

// VAPIDPublicKey returns the Web Push application server key, "" when Web Push is off.
func (p *Pusher) VAPIDPublicKey() string { return p.o.VAPIDPublicKey }

// Test sends a test notification to each of the user's devices now, bypassing cursors,
// presence and backoff, and returns each provider's answer: `parley push test`.
func (p *Pusher) Test(ctx context.Context, userID string) ([]protocol.PushTestResult, error) {
	var ts []store.PushTarget
	err := p.o.Store.View(ctx, func(tx store.ReadTx) error {
		var err error
		ts, err = tx.PushTargets(ctx, userID)
		return err
	})
	if err != nil {
		return nil, err
	}
	badge, err := p.o.Facts.Badge(ctx, userID)
	if err != nil {
		return nil, err
	}
	var out []protocol.PushTestResult
	now := p.o.Now()
	for _, t := range ts {
		r := protocol.PushTestResult{DeviceID: t.DeviceID, Provider: t.Provider, Outcome: "unconfigured"}
		if prov := p.o.Providers[t.Provider]; prov != nil {
			n := Notification{ID: notificationID(userID, t.DeviceID, -now.UnixNano()), CollapseID: "test",
				SenderName: "Parley", Preview: "Test notification", Badge: badge, Expiration: now.Add(time.Hour)}
			res := p.request(ctx, nil, prov, Target{UserID: userID, DeviceID: t.DeviceID, Provider: t.Provider, Token: t.Token,
				Topic: t.Topic, Locale: t.Locale, RegisteredAt: time.UnixMilli(t.RegisteredAt)}, n)
			r.Outcome, r.Status, r.Reason = res.Outcome.String(), res.Status, res.Reason
		}
		out = append(out, r)
	}
	return out, nil
}
