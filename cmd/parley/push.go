package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/protocol"
)

// pushFlags registers serve's offline push flags (docs/protocol.md section 13); maxDevices
// is the chat rules' cap on a user's registrations.
func pushFlags(fs *flag.FlagSet, p *server.PushConfig, maxDevices *int) {
	fs.StringVar(&p.APNsKeyFile, "apns-key-file", "", "APNs token-auth key (.p8 file from the Apple developer account); empty turns APNs off")
	fs.StringVar(&p.APNsKeyID, "apns-key-id", "", "the APNs key's id (10 characters)")
	fs.StringVar(&p.APNsTeamID, "apns-team-id", "", "the Apple developer team id")
	fs.StringVar(&p.APNsTopic, "apns-topic", "", "the iOS app's bundle id, the topic of every APNs notification (a client cannot choose it)")
	fs.StringVar(&p.APNsEndpoint, "apns-endpoint", p.APNsEndpoint, "APNs server (https://api.sandbox.push.apple.com for development builds)")
	fs.StringVar(&p.FCMCredentials, "fcm-credentials", "", "Firebase service-account key (JSON file); empty turns FCM off")
	fs.StringVar(&p.FCMEndpoint, "fcm-endpoint", p.FCMEndpoint, "FCM HTTP v1 server")
	fs.BoolVar(&p.WebPush, "webpush", p.WebPush, "send Web Push notifications (VAPID keys are generated and kept with the other secrets)")
	fs.StringVar(&p.WebPushSubject, "webpush-subject", p.WebPushSubject, "contact for Web Push services (mailto: or https: URL), sent in every VAPID token")
	fs.Var(listFlag{&p.WebPushHosts}, "webpush-hosts", "comma-separated push services Web Push endpoints may be on: a host, or *.domain for any host under that domain, either with :port for a port other than 443; * for any public host")
	fs.BoolVar(&p.AllowPrivate, "push-allow-private", false, "accept Web Push endpoints on any host and port, on loopback and private addresses, and plain http (tests and staging only)")
	fs.IntVar(maxDevices, "push-max-devices", *maxDevices, "how many devices of one user may be registered for push")
	fs.StringVar(&p.Content, "push-content", p.Content, "what a notification says of the message: none (conversation, sender, unread count; the app fetches the message) or preview (adds the start of the text)")
	fs.DurationVar(&p.Grace, "push-grace", p.Grace, "how long a connected device has to take an event before it is pushed anyway")
}

// listFlag is a flag of comma-separated items, kept in *p. Set drops spaces and empty
// items, and leaves an empty (not nil) list for an empty value, for Validate to refuse.
type listFlag struct{ p *[]string }

func (l listFlag) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l listFlag) Set(v string) error {
	out := []string{}
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	*l.p = out
	return nil
}

// pushCmd is `parley push test <user> [--server URL] [--admin-secret S]`: it asks the
// running server to send a test notification to each of the user's registered devices
// and prints what each provider answered. It goes through the server, which holds the
// providers' credentials and connections, rather than opening the data directory.
func pushCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	const use = "usage: parley push test <user_id> [--server http://127.0.0.1:8080] [--admin-secret S]"
	if len(args) == 0 || args[0] != "test" {
		return errors.New(use)
	}
	fs := newFlagSet("push test", stderr)
	base := fs.String("server", "http://127.0.0.1:8080", "the running server's base URL")
	secret := fs.String("admin-secret", "", "the server's admin secret")
	if err := parseFlags(fs, reorder(args[1:]), getenv); err != nil {
		return err
	}
	if fs.NArg() != 1 || *secret == "" {
		return errors.New(use + " (the admin secret may also come from PARLEY_ADMIN_SECRET)")
	}
	user := fs.Arg(0)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		strings.TrimSuffix(*base, "/")+"/v1/admin/users/"+url.PathEscape(user)+"/push-test", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+*secret)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var out protocol.PushTestResults
	if err := json.Unmarshal(body, &out); err != nil {
		return fmt.Errorf("unexpected answer: %w", err)
	}
	if len(out.Results) == 0 {
		fmt.Fprintf(stdout, "%s has no device registered for push\n", user)
		return nil
	}
	failed := 0
	for _, r := range out.Results {
		fmt.Fprintf(stdout, "%-20s %-8s %-13s", r.DeviceID, r.Provider, r.Outcome)
		if r.Status != 0 {
			fmt.Fprintf(stdout, " %d", r.Status)
		}
		if r.Reason != "" {
			fmt.Fprintf(stdout, " %s", r.Reason)
		}
		fmt.Fprintln(stdout)
		if r.Outcome != "delivered" {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d devices not delivered", failed, len(out.Results))
	}
	return nil
}
