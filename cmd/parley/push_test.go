package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/push/pushtest"
	"github.com/parleychat/parley/internal/server"
)

// TestPushTestCommand runs `parley push test` against a node whose FCM is the fake: one
// device delivered, one whose token the fake calls dead, and the exit status says so.
func TestPushTestCommand(t *testing.T) {
	f := pushtest.NewFCM(t)
	n := parleytest.Start(t, func(c *server.Config) {
		c.Push.FCMCredentials, c.Push.FCMEndpoint, c.Push.HTTPClient = f.CredentialsFile(), f.URL(), f.Client()
	})
	phone, tablet := n.User(t, "bob"), n.Token(t, "bob", "tablet")
	for tok, fcm := range map[string]string{phone: "live-token", tablet: "dead-token"} {
		n.MustDo(t, "PUT", "/v1/push/device", tok, map[string]string{"provider": "fcm", "token": fcm}, nil)
	}
	f.Unregister("dead-token")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"parley", "push", "test", "bob", "--server", n.URL, "--admin-secret", n.AdminSecret},
		func(string) string { return "" }, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "1 of 2 devices not delivered") {
		t.Fatalf("err %v, want 1 of 2 not delivered", err)
	}
	got := out.String()
	if !strings.Contains(got, "d1") || !strings.Contains(got, "delivered     200") ||
		!strings.Contains(got, "tablet") || !strings.Contains(got, "unregistered  404 UNREGISTERED") {
		t.Fatalf("output:\n%s", got)
	}
	if f.Count() != 1 {
		t.Fatalf("the fake accepted %d notifications, want 1", f.Count())
	}
}
