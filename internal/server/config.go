package server

import (
	"errors"
	"fmt"
	"github.com/parleychat/parley/internal/attach"
	"log/slog"
	"time"

	"github.com/parleychat/parley/internal/bus"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/gateway"
	"github.com/parleychat/parley/internal/presence"
	"github.com/parleychat/parley/internal/store"
	"github.com/parleychat/parley/internal/tier"
)

// Config is a node's configuration.
type Config struct {
	Data        string // data directory of the embedded store; required
	Engine      string // "pebble" or "sqlite" (embedded), or "postgres"; "" means the data directory's own, else DefaultEngine
	PostgresURL string // the database of Engine "postgres", shared by every node
	// PostgresMaxBatch and PostgresBatchWait tune the PostgreSQL appender's group commit
	// (postgres.Options.MaxBatch and BatchWait); zero keeps the defaults.
	PostgresMaxBatch  int
	PostgresBatchWait time.Duration
	Version           string // the binary's version, published in parley_build_info; "" reads "dev"
	Relaxed           bool   // fsync less: see sqlite.Options.Relaxed and pebble.Options.Relaxed
	AdminSecret       string // empty: generated once into Data/admin.secret
	Chat              chat.Config
	Gateway           gateway.Config
	// Presence is users' presence (grace, timeout); zero fields keep presence's defaults.
	Presence presence.Config
	Logger   *slog.Logger // default slog.Default()
	Now      func() time.Time
	// BusURL links the node to the other nodes on the same store: "" is a single node,
	// "nats://host:port" (a comma-separated list is allowed) the NATS server(s) they share.
	// The node fails to start if none answers.
	BusURL string
	// BusAuth is how the node authenticates to the NATS server(s) of BusURL and checks
	// them (credential files, TLS; docs/deployment.md, "Securing the bus"). It needs
	// BusURL.
	BusAuth bus.NATSAuth
	// Bus, if set, is an open bus used instead of BusURL; the caller closes it. Tests run
	// several nodes in one process on one bus.Memory.
	Bus bus.Bus
	// BusNoSeal turns off the sealing of bus messages with the cluster key (bus.Seal), which
	// is on by default, either bus: only to measure its cost or on a trusted network.
	BusNoSeal bool
	// BusKeyReload is how often a sealing node reads the cluster keys again, to seal with a
	// key added by a rotation and stop accepting a retired one (30 s if zero).
	BusKeyReload time.Duration
	// Push configures offline push (push.go).
	Push PushConfig
	// BlobStore is where attachments' bytes are kept (blobopen.Open): "" for files under
	// Data/blobs, "file:///path" for files elsewhere, "s3://bucket?endpoint=...&region=..."
	// for S3-compatible object storage. Required with Engine postgres, whose nodes must all
	// see every file.
	BlobStore string
	// UploadsDir is where uploads in progress are kept until they complete and move to the
	// blob store: "" for Data/uploads. Nodes sharing a store resume one another's uploads
	// only if they share this directory (a file system every node mounts); otherwise a
	// balancer must send each upload's requests to the node that took its creation.
	UploadsDir string
	// Attach tunes attachments (signed URL expiry, the collector, thumbnails).
	Attach attach.Config
	// Tier is the cold tier of history: messages older than Tier.HotWindow move into
	// segments in the blob store (0, the zero Config's, keeps every message hot), and
	// messages older than Tier.Retention are deleted from both tiers (0 keeps them all),
	// or than a group's own retention, which its owner sets within
	// [Tier.GroupRetentionMin, Tier.GroupRetentionMax] (a max of 0: no upper bound).
	Tier tier.Config
	// Store, if set, is an open store used instead of the embedded one in Data; the caller
	// closes it. Data still holds the node's keys (token signing, direct ids, admin secret),
	// which nodes sharing a store must share, and is not locked, so that they may share it.
	Store store.Store
}

// DefaultConfig returns the defaults for a node storing in dataDir.
func DefaultConfig(dataDir string) Config {
	return Config{Data: dataDir, Chat: chat.DefaultConfig(), Gateway: gateway.DefaultConfig(), Push: DefaultPushConfig(),
		Presence: presence.DefaultConfig(),
		Tier:     tier.Config{HotWindow: tier.DefaultHotWindow, GroupRetentionMin: tier.DefaultGroupRetentionMin}}
}

// MinAdminSecret is the shortest AdminSecret accepted, in bytes: the secret is the whole of
// the operator's authentication, so it must not be guessable by trying (the generated one
// is 32 random bytes, as 64 hex digits).
const MinAdminSecret = 32

// FieldError is a configuration that cannot work, worded in Config's own terms: Field is
// the field's name ("PostgresURL", "Push.Content"), and Msg says what is wrong with it and
// may name other fields. A command line maps those names to its flags.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + " " + e.Msg }

// Validate reports every setting of c that cannot work, each as a *FieldError where it is
// about one field (errors.Join of them all). New calls it first.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if s := c.AdminSecret; s != "" && len(s) < MinAdminSecret {
		bad("AdminSecret", "is %d bytes long, it must be at least %d: use a random one (openssl rand -hex 32) or leave it empty to have one generated", len(s), MinAdminSecret)
	}
	if p := c.Presence; p.Grace > 0 && p.Timeout > 0 && p.Timeout <= p.Grace {
		bad("Presence.Timeout", "is %v, it must be longer than Presence.Grace (%v): a node's users would expire before its grace ends", p.Timeout, p.Grace)
	}
	postgres := c.Engine == "postgres"
	switch {
	case postgres && c.PostgresURL == "" && c.Store == nil:
		bad("PostgresURL", "is required with Engine postgres")
	case !postgres && c.PostgresURL != "":
		bad("PostgresURL", "is only used with Engine postgres")
	case !postgres && (c.PostgresMaxBatch != 0 || c.PostgresBatchWait != 0):
		bad("PostgresMaxBatch", "and PostgresBatchWait are only used with Engine postgres")
	case c.PostgresMaxBatch < 0:
		bad("PostgresMaxBatch", "must not be negative")
	case postgres && c.Relaxed:
		bad("Relaxed", "is for the embedded engines; on PostgreSQL set synchronous_commit in the server or the URL")
	}
	if postgres && c.BlobStore == "" {
		bad("BlobStore", "is required with Engine postgres, so that every node sees every attachment: s3://bucket?endpoint=...&region=... (or file:///path on a file system every node mounts)")
	}
	if c.Tier.HotWindow < 0 || c.Tier.CacheBytes < 0 || c.Tier.Retention < 0 {
		bad("Tier", "HotWindow, CacheBytes and Retention must not be negative (a HotWindow of 0 keeps every message hot, a Retention of 0 keeps every message)")
	}
	switch r := c.Tier; {
	case r.GroupRetentionMin < 0 || r.GroupRetentionMax < 0:
		bad("Tier", "GroupRetentionMin and GroupRetentionMax must not be negative (a GroupRetentionMax of 0 sets no upper bound)")
	case r.GroupRetentionMax > 0 && r.GroupRetentionMin > r.GroupRetentionMax:
		bad("Tier", "GroupRetentionMin (%v) must not be above GroupRetentionMax (%v)", r.GroupRetentionMin, r.GroupRetentionMax)
	}
	switch {
	case c.Bus == nil && c.BusURL == "" && !c.BusAuth.IsZero():
		bad("BusAuth", "(credentials, nkey, TLS files) is only used with BusURL")
	case c.BusURL != "":
		if err := c.BusAuth.Validate(); err != nil {
			errs = append(errs, &FieldError{Field: "BusAuth", Msg: err.Error()})
		}
	}
	errs = append(errs, c.Chat.Validate(), c.Gateway.Validate(), c.Push.Validate())
	return errors.Join(errs...)
}
