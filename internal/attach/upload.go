package attach

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/tus/tusd/v2/pkg/filestore"
	tushandler "github.com/tus/tusd/v2/pkg/handler"
	tuslog "golang.org/x/exp/slog"

	"github.com/parleychat/parley/internal/blob/disk"
	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/internal/media"
	"github.com/parleychat/parley/internal/store"
)

// BasePath is where uploads are served: POST creates one, HEAD and PATCH BasePath+id resume it.
const BasePath = "/v1/uploads/"

// tusHandler is tusd's handler with the routes Parley serves: creation, HEAD and PATCH. No
// deferred length (the quota counts an upload from its creation), no concatenation, no
// termination, no download through tus (downloads check who may see the file).
type tusHandler struct {
	*tushandler.UnroutedHandler
	resume http.Handler // HEAD and PATCH, with the base path stripped as tusd expects
}

type identityKey struct{}

func newTus(s *Service) (*tusHandler, error) {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	composer := tushandler.NewStoreComposer()
	locker := newHandoverLocker()
	composer.UseCore(syncStore{filestore.New(s.dir), locker})
	locker.UseIn(composer)
	h, err := tushandler.NewUnroutedHandler(tushandler.Config{
		StoreComposer:           composer,
		BasePath:                BasePath,
		MaxSize:                 s.chat.MaxUploadSize(),
		DisableDownload:         true,
		DisableTermination:      true,
		DisableConcatenation:    true,
		Cors:                    &tushandler.CorsConfig{Disable: true},
		Logger:                  discardLogger,
		PreUploadCreateCallback: s.created,
		PreFinishResponseCallback: func(hook tushandler.HookEvent) (tushandler.HTTPResponse, error) {
			return tushandler.HTTPResponse{}, s.tusErr(s.complete(hook.Context, hook.Upload.ID))
		},
	})
	if err != nil {
		return nil, err
	}
	t := &tusHandler{UnroutedHandler: h}
	t.resume = http.StripPrefix(BasePath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			h.HeadFile(w, r)
		} else {
			h.PatchFile(w, r)
		}
	}))
	return t, nil
}

// ServeUpload serves a tus request of me's under BasePath: OPTIONS, POST BasePath, HEAD
// and PATCH BasePath+id. Another user's upload is 404, as an unknown one is.
func (s *Service) ServeUpload(w http.ResponseWriter, r *http.Request, me chat.Identity, id string) {
	r = r.WithContext(context.WithValue(r.Context(), identityKey{}, me))
	s.tus.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id == "" {
			if err := s.checkCreation(r); err != nil {
				s.writeError(w, err) // tusd would answer these in plain text
				return
			}
			s.tus.PostFile(w, r)
			return
		}
		a, err := s.chat.OwnUpload(r.Context(), me, id)
		if err != nil {
			s.writeError(w, err)
			return
		}
		if a.State == store.AttachmentUploading {
			// A completion cut short (a crash after the bytes were in, before the row
			// said so) is finished now: tusd would only report the full offset.
			if err := s.completeIfFull(r.Context(), a); err != nil {
				s.writeError(w, err)
				return
			}
			if a, err = s.chat.OwnUpload(r.Context(), me, id); err != nil {
				s.writeError(w, err)
				return
			}
		}
		if a.State == store.AttachmentComplete {
			// Its tus files are gone: every byte is in, whatever offset is asked.
			w.Header().Set("Upload-Offset", strconv.FormatInt(a.Size, 10))
			w.Header().Set("Upload-Length", strconv.FormatInt(a.Size, 10))
			w.Header().Set("Cache-Control", "no-store")
			if r.Method == http.MethodHead {
				w.WriteHeader(http.StatusOK)
			} else {
				w.WriteHeader(http.StatusNoContent)
			}
			return
		}
		s.tus.resume.ServeHTTP(w, r)
	})).ServeHTTP(w, r)
}

// created is tusd's pre-create hook: the upload gets its attachment id and row (size and
// quota checked) before any byte is stored.
func (s *Service) created(hook tushandler.HookEvent) (tushandler.HTTPResponse, tushandler.FileInfoChanges, error) {
	me, ok := hook.Context.Value(identityKey{}).(chat.Identity)
	if !ok {
		return tushandler.HTTPResponse{}, tushandler.FileInfoChanges{}, errors.New("attach: upload without an identity")
	}
	id := chat.NewAttachmentID()
	if err := s.chat.CreateUpload(hook.Context, me, id, hook.Upload.Size); err != nil {
		return tushandler.HTTPResponse{}, tushandler.FileInfoChanges{}, s.tusErr(err)
	}
	return tushandler.HTTPResponse{}, tushandler.FileInfoChanges{ID: id, MetaData: tushandler.MetaData{}}, nil
}

// checkCreation answers, in the API's JSON, the creations tusd would refuse in plain text:
// a length deferred, missing or malformed, or over the largest upload. Only a POST creates.
func (s *Service) checkCreation(r *http.Request) error {
	if r.Method != http.MethodPost {
		return nil
	}
	if r.Header.Get("Upload-Defer-Length") != "" {
		return fmt.Errorf("%w: Upload-Length is required (Upload-Defer-Length is not supported)", chat.ErrInvalid)
	}
	size, err := strconv.ParseInt(r.Header.Get("Upload-Length"), 10, 64)
	switch {
	case err != nil || size < 0:
		return fmt.Errorf("%w: Upload-Length must be the file's size in bytes, a non-negative integer", chat.ErrInvalid)
	case size > s.chat.MaxUploadSize():
		return fmt.Errorf("%w: uploads are at most %d bytes", chat.ErrTooLarge, s.chat.MaxUploadSize())
	}
	return nil
}

// discardLogger silences tusd's log of every request; failures are logged here.
var discardLogger = tuslog.New(tuslog.NewTextHandler(io.Discard, nil)) // tusd logs with x/exp/slog

// tusErr makes err an answer tusd writes: the API's status and JSON body.
func (s *Service) tusErr(err error) error {
	if err == nil {
		return nil
	}
	status, body := s.reply(err)
	if status >= 500 {
		s.log.Error("attach: upload failed", "err", err)
	}
	return tushandler.Error{ErrorCode: "ERR_PARLEY", Message: err.Error(), HTTPResponse: tushandler.HTTPResponse{
		StatusCode: status, Body: string(body), Header: tushandler.HTTPHeader{"Content-Type": "application/json"},
	}}
}

// completeIfFull completes upload a if all its bytes are in its tus file.
func (s *Service) completeIfFull(ctx context.Context, a store.Attachment) error {
	fi, err := os.Stat(s.binPath(a.ID))
	if err != nil || fi.Size() != a.Size {
		return nil // still uploading (or its file is gone: tusd answers 404)
	}
	return s.complete(ctx, a.ID)
}

func (s *Service) binPath(id string) string { return filepath.Join(s.dir, id) }

// complete is the work of a finished upload, before its last PATCH is answered: hash and
// sniff the bytes, make the thumbnail, store both blobs durably, and only then mark the row
// complete, so that no message can name bytes that are not durable. The tus files go last.
func (s *Service) complete(ctx context.Context, id string) error {
	path := s.binPath(id)
	f, err := os.Open(path)
	if err != nil {
		return blobErr(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return blobErr(err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return blobErr(err)
	}
	info, err := media.Probe(f, fi.Size())
	if err != nil {
		return blobErr(err)
	}
	meta := store.AttachmentMeta{
		MimeType: info.ContentType, SHA256: hex.EncodeToString(h.Sum(nil)),
		Width: info.Width, Height: info.Height, DurationMS: info.DurationMS,
	}
	thumb, err := s.thumbnail(ctx, f, fi.Size(), info)
	if err != nil {
		return err
	}
	if err := s.blobs.PutFile(ctx, contentKey(id), path); err != nil {
		return blobErr(err)
	}
	if thumb != nil {
		if err := s.blobs.Put(ctx, thumbKey(id), bytes.NewReader(thumb.JPEG), int64(len(thumb.JPEG))); err != nil {
			return blobErr(err)
		}
		meta.Thumbnail, meta.Preview = true, thumb.Preview
	}
	if err := s.chat.CompleteUpload(ctx, id, meta); err != nil {
		return err
	}
	s.removeUpload(id)
	return nil
}

// thumbnail makes f's thumbnail when it is an image within the limits; nil otherwise (a
// bomb, a broken image, a file of another type: stored and served as a file).
func (s *Service) thumbnail(ctx context.Context, f *os.File, size int64, info media.Info) (*media.Thumb, error) {
	if media.Kind(info.ContentType) != media.KindImage {
		return nil, nil
	}
	select {
	case s.thumbs <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.thumbs }()
	t, err := media.Thumbnail(f, size, info, s.cfg.Thumb)
	if err != nil {
		s.log.Info("attach: no thumbnail", "type", info.ContentType, "err", err)
		return nil, nil
	}
	return &t, nil
}

// removeUpload removes an upload's tus files.
func (s *Service) removeUpload(id string) {
	for _, p := range []string{s.binPath(id), s.binPath(id) + ".info"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("attach: remove upload file", "path", p, "err", err)
		}
	}
}

// syncStore is tusd's file store with every chunk fsynced before it is acknowledged: the
// offset a client resumes from is one the server will still have after a crash.
type syncStore struct {
	filestore.FileStore
	locker *handoverLocker
}

func (s syncStore) NewUpload(ctx context.Context, info tushandler.FileInfo) (tushandler.Upload, error) {
	u, err := s.FileStore.NewUpload(ctx, info)
	if err != nil {
		return nil, err
	}
	return s.wrap(u), disk.Sync(s.Path)
}

func (s syncStore) GetUpload(ctx context.Context, id string) (tushandler.Upload, error) {
	u, err := s.FileStore.GetUpload(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.wrap(u), nil
}

func (s syncStore) wrap(u tushandler.Upload) syncUpload {
	info, _ := u.GetInfo(context.Background()) // the file store's GetInfo never fails
	return syncUpload{u, info.ID, info.Storage[filestore.StorageKeyPath], s.locker}
}

type syncUpload struct {
	tushandler.Upload
	id     string
	path   string
	locker *handoverLocker
}

func (u syncUpload) WriteChunk(ctx context.Context, offset int64, src io.Reader) (int64, error) {
	u.locker.writing(u.id)
	n, err := u.Upload.WriteChunk(ctx, offset, src)
	if n > 0 {
		if serr := disk.Sync(u.path); err == nil {
			err = serr
		}
	}
	return n, err
}
