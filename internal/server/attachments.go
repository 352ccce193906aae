package server

import (
	"cmp"
	"path/filepath"

	"github.com/parleychat/parley/internal/attach"
	"github.com/parleychat/parley/internal/blob"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/gateway"
)

// AttachmentSecretFile names the secret that signs attachment URLs. Nodes sharing a store
// share it (Secrets), so that a URL one node signed is good on every other.
const AttachmentSecretFile = "attachment-url.secret"

// UploadsDir is where, under the data directory, uploads in progress are kept until they
// complete and move to the blob store, unless Config.UploadsDir says otherwise.
const UploadsDir = "uploads"

// openAttachments opens the attachment service over blobs.
func openAttachments(cfg Config, svc *chat.Service, blobs blob.Store, secret func(string) (string, bool, error)) (*attach.Service, error) {
	key, _, err := secret(AttachmentSecretFile)
	if err != nil {
		return nil, err
	}
	return attach.New(attach.Options{
		Chat: svc, Blobs: blobs, Dir: cmp.Or(cfg.UploadsDir, filepath.Join(cfg.Data, UploadsDir)), Secret: []byte(key),
		Config: cfg.Attach, Logger: cfg.Logger, ErrorReply: gateway.ErrorReply,
	})
}
