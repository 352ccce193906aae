package server

import (
	"cmp"
	"fmt"
	"path/filepath"

	"github.com/parleychat/parley/internal/attach"
	"github.com/parleychat/parley/internal/blob"
	"github.com/parleychat/parley/internal/blob/blobopen"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/gateway"
)

// AttachmentSecretFile names the secret that signs attachment URLs. Nodes sharing a store
// share it (Secrets), so that a URL one node signed is good on every other.
const AttachmentSecretFile = "attachment-url.secret"

// UploadsDir is where, under the data directory, uploads in progress are kept until they
// complete and move to the blob store, unless Config.UploadsDir says otherwise.
const UploadsDir = "uploads"

// openAttachments opens the blob store cfg names and the attachment service over it.
func openAttachments(cfg Config, svc *chat.Service, secret func(string) (string, bool, error)) (*attach.Service, blob.Store, error) {
	key, _, err := secret(AttachmentSecretFile)
	if err != nil {
		return nil, nil, err
	}
	blobs, err := blobopen.Open(cfg.BlobStore, cfg.Data)
	if err != nil {
		return nil, nil, fmt.Errorf("open blob store: %w", err)
	}
	att, err := attach.New(attach.Options{
		Chat: svc, Blobs: blobs, Dir: cmp.Or(cfg.UploadsDir, filepath.Join(cfg.Data, UploadsDir)), Secret: []byte(key),
		Config: cfg.Attach, Logger: cfg.Logger, ErrorReply: gateway.ErrorReply,
	})
	if err != nil {
		blobs.Close()
		return nil, nil, err
	}
	return att, blobs, nil
}
