package main

import (
	"flag"

	"github.com/parleychat/parley/internal/server"
)

// pushFlags registers serve's offline push flags (docs/protocol.md section 13).
func pushFlags(fs *flag.FlagSet, p *server.PushConfig) {
	fs.StringVar(&p.APNsKeyFile, "apns-key-file", "", "APNs token-auth key (.p8 file from the Apple developer account); empty turns APNs off")
	fs.StringVar(&p.APNsKeyID, "apns-key-id", "", "the APNs key's id (10 characters)")
	fs.StringVar(&p.APNsTeamID, "apns-team-id", "", "the Apple developer team id")
	fs.StringVar(&p.APNsEndpoint, "apns-endpoint", p.APNsEndpoint, "APNs server (https://api.sandbox.push.apple.com for development builds)")
	fs.StringVar(&p.FCMCredentials, "fcm-credentials", "", "Firebase service-account key (JSON file); empty turns FCM off")
	fs.StringVar(&p.FCMEndpoint, "fcm-endpoint", p.FCMEndpoint, "FCM HTTP v1 server")
	fs.BoolVar(&p.WebPush, "webpush", p.WebPush, "send Web Push notifications (VAPID keys are generated and kept with the other secrets)")
	fs.StringVar(&p.WebPushSubject, "webpush-subject", p.WebPushSubject, "contact for Web Push services (mailto: or https: URL), sent in every VAPID token")
	fs.BoolVar(&p.AllowPrivate, "push-allow-private", false, "accept Web Push endpoints on loopback and private addresses, and plain http (tests and staging only)")
	fs.StringVar(&p.Content, "push-content", p.Content, "what a notification says of the message: none (conversation, sender, unread count; the app fetches the message) or preview (adds the start of the text)")
	fs.DurationVar(&p.Grace, "push-grace", p.Grace, "how long a connected device has to take an event before it is pushed anyway")
}
