package protocol

import "encoding/json"

// Limits of attachments (section 14).
const (
	MaxAttachmentName = 255  // bytes of content.name
	MaxCaption        = 4096 // bytes of content.caption
)

// Attachment is what the server knows of an uploaded file (GET /v1/attachments/{id}, and
// content.attachment of a message that carries it). Every field but the id comes from the
// server's reading of the bytes, never from the client.
type Attachment struct {
	ID         string `json:"id"`
	Complete   bool   `json:"complete"`              // the upload finished: the file may be sent and downloaded
	MimeType   string `json:"mime_type,omitempty"`   // sniffed from the bytes; empty until complete
	Size       int64  `json:"size"`                  // bytes
	SHA256     string `json:"sha256,omitempty"`      // lowercase hex of the bytes; empty until complete
	Width      int    `json:"width,omitempty"`       // pixels, images and video
	Height     int    `json:"height,omitempty"`      // pixels, images and video
	DurationMS int64  `json:"duration_ms,omitempty"` // audio and video, when the container says
	Thumbnail  bool   `json:"thumbnail"`             // GET .../thumbnail serves one
	// Preview is a tiny JPEG of an image (at most 32 px on its long side) as a data: URL, to
	// paint in the message's place before anything is downloaded; empty for other files.
	Preview   string `json:"preview,omitempty"`
	CreatedAt int64  `json:"created_at"` // Unix ms of the upload's creation
}

// AttachmentContent is the content of a message of content_type 2 to 5 (image, file, audio,
// video). The client sends attachment_id and the optional fields; the server stores the
// message with Attachment filled in from the upload, replacing whatever the client put
// there, so that every reader lays the message out from the message alone. Other fields the
// client adds are kept.
type AttachmentContent struct {
	AttachmentID string      `json:"attachment_id"`
	Name         string      `json:"name,omitempty"`    // the file's name as the sender gave it, at most MaxAttachmentName bytes
	Caption      string      `json:"caption,omitempty"` // at most MaxCaption bytes
	Attachment   *Attachment `json:"attachment,omitempty"`
}

// IsAttachmentContent reports whether messages of content type t carry an attachment.
func IsAttachmentContent(t int) bool { return t >= ContentImage && t <= ContentVideo }

// Attachment returns the attachment a message carries: nil for other content types, for a
// recalled message and for content that is not an AttachmentContent.
func (m Message) Attachment() *AttachmentContent {
	if !IsAttachmentContent(m.ContentType) || m.Recalled {
		return nil
	}
	var c *AttachmentContent
	if json.Unmarshal(m.Content, &c) != nil || c == nil || c.AttachmentID == "" {
		return nil
	}
	return c
}

// AttachmentURLs answers POST /v1/attachments/{id}/urls: URLs that fetch the attachment
// without an Authorization header, until ExpiresAt. Each names one attachment and one of
// its two forms; changing any part of one makes it invalid.
type AttachmentURLs struct {
	Content   string `json:"content"`             // path and query of the bytes, relative to the server
	Thumbnail string `json:"thumbnail,omitempty"` // of the thumbnail, when there is one
	ExpiresAt int64  `json:"expires_at"`          // Unix ms
}

// AttachmentURLsRequest is the body of POST /v1/attachments/{id}/urls (it may be empty).
type AttachmentURLsRequest struct {
	// ExpiresIn is how long the URLs stay valid, in seconds: 1 to 3600, default 3600.
	ExpiresIn int `json:"expires_in,omitempty"`
}

// ValidAttachmentID reports whether s has the form of a server-assigned attachment id:
// "a_" and 26 characters of lower-case base32.
func ValidAttachmentID(s string) bool {
	if len(s) != 28 || s[:2] != "a_" {
		return false
	}
	for i := 2; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}
