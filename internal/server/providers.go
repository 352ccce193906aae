package server

import (
	"context"
	"crypto/ecdh"
	"crypto/sha256"
	"encoding/base64"
	"fmt"

	"github.com/parleychat/parley/internal/push"
	"github.com/parleychat/parley/internal/push/apns"
	"github.com/parleychat/parley/internal/push/fcm"
	"github.com/parleychat/parley/internal/push/webpush"
)

// VAPIDSecretFile names the secret the node's VAPID key pair is derived from. Kept with the
// other secrets (the data directory, or the shared database), it gives every node, and
// every restart, the same key: browsers' subscriptions are bound to it.
const VAPIDSecretFile = "vapid.secret"

// newProviders returns the providers cfg turns on, and the VAPID public key ("" without
// Web Push).
func newProviders(ctx context.Context, cfg PushConfig, secret func(string) (string, bool, error)) (map[string]push.Provider, string, error) {
	ps := make(map[string]push.Provider)
	if cfg.APNsKeyFile != "" {
		p, err := apns.New(apns.Options{KeyFile: cfg.APNsKeyFile, KeyID: cfg.APNsKeyID, TeamID: cfg.APNsTeamID,
			Topic: cfg.APNsTopic, Endpoint: cfg.APNsEndpoint, HTTPClient: cfg.HTTPClient})
		if err != nil {
			return nil, "", fmt.Errorf("apns: %w", err)
		}
		ps[push.APNs] = p
	}
	if cfg.FCMCredentials != "" {
		p, err := fcm.New(fcm.Options{CredentialsFile: cfg.FCMCredentials, Endpoint: cfg.FCMEndpoint, HTTPClient: cfg.HTTPClient})
		if err != nil {
			return nil, "", fmt.Errorf("fcm: %w", err)
		}
		ps[push.FCM] = p
	}
	if !cfg.WebPush {
		return ps, "", nil
	}
	seed, _, err := secret(VAPIDSecretFile)
	if err != nil {
		return nil, "", err
	}
	private, public, err := vapidKeys(seed)
	if err != nil {
		return nil, "", err
	}
	p, err := webpush.New(webpush.Options{VAPIDPublicKey: public, VAPIDPrivateKey: private, Subscriber: cfg.WebPushSubject,
		AllowPrivate: cfg.AllowPrivate, Hosts: cfg.WebPushHosts, HTTPClient: cfg.HTTPClient})
	if err != nil {
		return nil, "", fmt.Errorf("webpush: %w", err)
	}
	ps[push.WebPush] = p
	return ps, public, nil
}

// vapidKeys derives a P-256 key pair from seed: the private scalar is SHA-256 of the seed
// (hashed again in the rare case it is not below the curve's order), both keys base64url
// as Web Push libraries and PushManager.subscribe take them.
func vapidKeys(seed string) (private, public string, err error) {
	h := sha256.Sum256([]byte("parley vapid\x00" + seed))
	for range 8 {
		k, err := ecdh.P256().NewPrivateKey(h[:])
		if err == nil {
			return base64.RawURLEncoding.EncodeToString(h[:]), base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes()), nil
		}
		h = sha256.Sum256(h[:])
	}
	return "", "", fmt.Errorf("vapid: no valid key from the seed")
}
