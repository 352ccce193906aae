// Package media says what an uploaded attachment is and makes its thumbnail.
//
// After an upload completes the server calls Probe to learn the content type (sniffed from the
// bytes, never taken from the client), the dimensions and the duration, then Thumbnail for the
// images it shows inline. Inline and Kind turn a sniffed type into serving and messaging
// decisions, so that a file a browser would run (HTML, SVG, XML, PDF, scripts) is always served
// as an attachment.
//
// Probe reads headers only. Thumbnail decodes one image at a time, and only after its header
// says the image is within Limits.MaxPixels; see Thumbnail for the memory it may use.
package media

import (
	"errors"
	"fmt"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"strings"

	"github.com/gabriel-vasile/mimetype"
	"golang.org/x/image/webp"
)

// OctetStream is the content type of a file Probe does not recognise.
const OctetStream = "application/octet-stream"

// Message content types a client uses for an attachment (see Kind).
const (
	KindImage = 2
	KindFile  = 3
	KindAudio = 4
	KindVideo = 5
)

// Info is what the server tells clients about an attachment before they download it.
type Info struct {
	// ContentType is sniffed from the bytes, never taken from the client, and has no
	// parameters; it is "application/octet-stream" when unknown.
	ContentType string
	// Width and Height are the displayed size of images and video: after EXIF orientation
	// for JPEG (a portrait photo stored landscape with orientation 6 reports portrait) and
	// after the track matrix's quarter turns for MP4/MOV. 0 when unknown.
	Width, Height int
	// DurationMS is the length of audio and video when the container states it (the mvhd
	// box of MP4, M4A and MOV); 0 otherwise.
	DurationMS int64
}

// Probe reads what it needs of the file (headers, not the whole image) and returns its Info. It
// never decodes pixel data. A file it cannot recognise is application/octet-stream with no
// error; the error is only for read failures, since a malformed file is still a file the
// server stores and serves as an attachment.
func Probe(r io.ReaderAt, size int64) (Info, error) {
	er := &errReaderAt{r: r}
	sr := io.NewSectionReader(er, 0, size)
	info := Info{ContentType: sniff(sr)}
	if er.err != nil {
		return Info{}, er.err
	}
	switch {
	case thumbnailed(info.ContentType):
		info.Width, info.Height = probeImage(sr, info.ContentType)
	case isMP4Family(info.ContentType):
		m := probeMP4(sr)
		info.Width, info.Height, info.DurationMS = m.width, m.height, m.durationMS
		if info.ContentType == "video/mp4" && m.hasAudio && !m.hasVideo {
			// An MP4 with only a sound track is an M4A whatever its brand says.
			info.ContentType = "audio/mp4"
		}
	}
	if er.err != nil {
		return Info{}, er.err
	}
	return info, nil
}

// sniff returns the base content type of the bytes sr holds. mimetype reads at most its
// read limit (3 KiB by default) from the start of the file.
func sniff(sr *io.SectionReader) string {
	m, err := mimetype.DetectReader(io.NewSectionReader(sr, 0, sr.Size()))
	if err != nil || m == nil {
		return OctetStream
	}
	return normalise(m.String())
}

// aliases maps the names mimetype gives to the ones browsers and clients expect.
var aliases = map[string]string{
	"audio/x-m4a":  "audio/mp4",
	"video/x-m4v":  "video/mp4",
	"audio/x-wav":  "audio/wav",
	"audio/x-flac": "audio/flac",
}

// normalise lowercases a content type, drops its parameters ("; charset=utf-8") and maps
// aliases, so the allowlists below compare like with like.
func normalise(ct string) string {
	base, _, _ := strings.Cut(ct, ";")
	base = strings.ToLower(strings.TrimSpace(base))
	if a, ok := aliases[base]; ok {
		base = a
	}
	if base == "" {
		return OctetStream
	}
	return base
}

// imageFormat is what this package knows of each image type it thumbnails: the header
// reader used to enforce MaxPixels and the decoder used after it.
type imageFormat struct {
	config func(io.Reader) (image.Config, error)
	decode func(io.Reader) (image.Image, error)
}

// formats are chosen by the sniffed type rather than registered with package image, so a
// file is decoded only by the decoder of the type Probe reported (and no init registration).
// gif.Decode keeps only the first frame.
var formats = map[string]imageFormat{
	"image/jpeg": {jpeg.DecodeConfig, jpeg.Decode},
	"image/png":  {png.DecodeConfig, png.Decode},
	"image/gif":  {gif.DecodeConfig, gif.Decode},
	"image/webp": {webp.DecodeConfig, webp.Decode},
}

func thumbnailed(contentType string) bool {
	_, ok := formats[contentType]
	return ok
}

// probeImage returns an image's displayed size from its header, or zeros when the header
// does not parse.
func probeImage(sr *io.SectionReader, contentType string) (w, h int) {
	cfg, err := formats[contentType].config(io.NewSectionReader(sr, 0, sr.Size()))
	if err != nil {
		return 0, 0
	}
	w, h = cfg.Width, cfg.Height
	if contentType == "image/jpeg" && jpegOrientation(sr).swapsSides() {
		w, h = h, w
	}
	return w, h
}

// inline is the allowlist of types a browser may show in place: raster images, audio and
// video, which browsers render without running anything. Everything else (SVG, HTML, XML,
// PDF, scripts, unknown) is served as an attachment.
var inline = map[string]int{
	"image/jpeg":      KindImage,
	"image/png":       KindImage,
	"image/gif":       KindImage,
	"image/webp":      KindImage,
	"audio/mpeg":      KindAudio,
	"audio/mp4":       KindAudio,
	"audio/aac":       KindAudio,
	"audio/ogg":       KindAudio,
	"audio/opus":      KindAudio,
	"audio/webm":      KindAudio,
	"audio/wav":       KindAudio,
	"audio/flac":      KindAudio,
	"video/mp4":       KindVideo,
	"video/webm":      KindVideo,
	"video/ogg":       KindVideo,
	"video/quicktime": KindVideo,
}

// Inline reports whether a download of contentType may be shown in a browser (served without
// Content-Disposition: attachment). It is an allowlist of raster image, audio and video
// types; SVG, HTML, XML, PDF, JavaScript and anything unlisted are refused, because a browser
// showing them in the server's origin could run script. Parameters and case are ignored.
func Inline(contentType string) bool {
	_, ok := inline[normalise(contentType)]
	return ok
}

// Kind maps a content type to the message content_type a client should use: KindImage (2),
// KindFile (3), KindAudio (4) or KindVideo (5). Only types Inline allows are images, audio
// or video, so a client never tries to show in place what the server serves as an
// attachment (an SVG or a TIFF is a file).
func Kind(contentType string) int {
	if k, ok := inline[normalise(contentType)]; ok {
		return k
	}
	return KindFile
}

// errReaderAt remembers the first read failure (anything but io.EOF), so Probe can tell a
// failing disk from a malformed file: the parsers it calls report both as errors.
type errReaderAt struct {
	r   io.ReaderAt
	err error
}

func (e *errReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := e.r.ReadAt(p, off)
	if err != nil && !errors.Is(err, io.EOF) && e.err == nil {
		e.err = fmt.Errorf("media: read at %d: %w", off, err)
	}
	return n, err
}
