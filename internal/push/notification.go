package push

// This file holds what a notification's fields are made from: the senders' names, the
// notification and collapse ids, and the preview.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"
)

// nameCache keeps senders' display names for a minute: a burst to 10,000 devices from one
// sender reads the name once, and a renamed user shows the new name within a minute.
type nameCache struct {
	mu sync.Mutex
	m  map[string]cachedName
}

type cachedName struct {
	name string
	at   time.Time
}

const nameTTL = time.Minute

func (c *nameCache) get(uid string, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.m[uid]
	return n.name, ok && now.Sub(n.at) < nameTTL
}

func (c *nameCache) put(uid, name string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= 10000 {
		c.m = make(map[string]cachedName) // bounded: start again rather than track age
	}
	c.m[uid] = cachedName{name, now}
}

// notificationID is the UUID of the push of event cursor to device: the same on every
// attempt and on every node, so a repeat after a crash is recognisable.
func notificationID(uid, device string, cursor int64) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d", uid, device, cursor))
	h[6] = h[6]&0x0f | 0x50 // version 5 (name-based)
	h[8] = h[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// collapseID is the conversation's collapse key: 22 characters of base64url, within every
// provider's limit (Web Push's Topic takes 32) and the same on every node.
func collapseID(convID string) string {
	h := sha256.Sum256([]byte(convID))
	return base64.RawURLEncoding.EncodeToString(h[:16])
}

// kinds name what a message of content types 2 to 5 carries (push.Notification.Kind),
// and kindLabels what an alert says of it.
var (
	kinds      = map[int]string{2: "image", 3: "file", 4: "audio", 5: "video"}
	kindLabels = map[string]string{"image": "Photo", "file": "File", "audio": "Voice message", "video": "Video"}
)

// Body is what an alert shows of n: its preview, else what kind of attachment it carries
// ("Photo"), else "New message".
func (n Notification) Body() string {
	switch {
	case n.Preview != "":
		return n.Preview
	case kindLabels[n.Kind] != "":
		return kindLabels[n.Kind]
	}
	return "New message"
}

// preview returns the start of a text message (content {"text": "…"}), at most n
// characters, or "" for any other content.
func preview(content []byte, n int) string {
	var c struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(content, &c) != nil || c.Text == "" {
		return ""
	}
	if utf8.RuneCountInString(c.Text) <= n {
		return c.Text
	}
	r := []rune(c.Text)
	return string(r[:n]) + "…"
}
