// Package attach carries attachments' bytes: resumable uploads on the tus 1.0 protocol
// (tusd's handler on its file store, under the data directory), the work done when an upload
// completes (hash, sniff, thumbnail, then the blob store, then the row), downloads with the
// headers that keep an uploaded page from running in the server's origin, signed URLs, and
// the collector that deletes what no message carries. The rules (quota, who may see what)
// are chat's; the bytes live in a blob.Store.
package attach

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/parleychat/parley/internal/blob"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/media"
)

// Config holds what an operator may tune.
type Config struct {
	// URLExpiry is the longest (and the default) validity of a signed URL; default 1 h.
	URLExpiry time.Duration
	// IdleAfter is how long an attachment no message carries is kept; default 24 h.
	IdleAfter time.Duration
	// CollectEvery is how often the collector looks for idle attachments; default 10 min.
	CollectEvery time.Duration
	// Thumb bounds thumbnails (media.Limits' defaults when zero).
	Thumb media.Limits
	// Thumbnailers is how many thumbnails are made at once; default 2. Each may hold a
	// decoded image of up to Thumb.MaxPixels.
	Thumbnailers int
}

func (c Config) withDefaults() Config {
	if c.URLExpiry <= 0 {
		c.URLExpiry = time.Hour
	}
	if c.IdleAfter <= 0 {
		c.IdleAfter = 24 * time.Hour
	}
	if c.CollectEvery <= 0 {
		c.CollectEvery = 10 * time.Minute
	}
	if c.Thumbnailers <= 0 {
		c.Thumbnailers = 2
	}
	return c
}

// Options are the dependencies of a Service.
type Options struct {
	Chat   *chat.Service // required
	Blobs  blob.Store    // required
	Dir    string        // where uploads in progress are kept; required
	Secret []byte        // signs URLs; at least 32 bytes
	Config Config
	Logger *slog.Logger
	// ErrorReply turns an error into the status and body the API answers with it
	// (gateway.ErrorReply), for the answers tusd writes itself.
	ErrorReply func(error) (int, []byte)
}

// Service serves attachments. It is safe for concurrent use.
type Service struct {
	chat   *chat.Service
	blobs  blob.Store
	dir    string
	secret []byte
	cfg    Config
	log    *slog.Logger
	reply  func(error) (int, []byte)
	tus    *tusHandler
	thumbs chan struct{} // one token per thumbnail being made
}

// New returns a Service.
func New(o Options) (*Service, error) {
	switch {
	case o.Chat == nil || o.Blobs == nil || o.Dir == "" || o.ErrorReply == nil:
		return nil, errors.New("attach: Chat, Blobs, Dir and ErrorReply are required")
	case len(o.Secret) < 32:
		return nil, errors.New("attach: the URL secret must be at least 32 bytes")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	cfg := o.Config.withDefaults()
	s := &Service{
		chat: o.Chat, blobs: o.Blobs, dir: o.Dir, secret: o.Secret, cfg: cfg, log: o.Logger,
		reply: o.ErrorReply, thumbs: make(chan struct{}, cfg.Thumbnailers),
	}
	t, err := newTus(s)
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	s.tus = t
	return s, nil
}

// Blob keys: an attachment's bytes and its thumbnail.
func contentKey(id string) string { return "a/" + id }
func thumbKey(id string) string   { return "t/" + id }

// blobErr turns a blob store failure into the API's 503.
func blobErr(err error) error {
	if errors.Is(err, blob.ErrNotFound) {
		return fmt.Errorf("%w: attachment bytes missing", chat.ErrUnavailable)
	}
	return fmt.Errorf("%w: blob store: %v", chat.ErrUnavailable, err)
}

// writeError answers err as the API does.
func (s *Service) writeError(w http.ResponseWriter, err error) {
	status, body := s.reply(err)
	if status >= 500 && !errors.Is(err, context.Canceled) {
		s.log.Error("attach: request failed", "err", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
