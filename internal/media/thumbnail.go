package media

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"io"

	"golang.org/x/image/draw"
)

// Limits bound the work a thumbnail may do. A zero field takes its default.
type Limits struct {
	// MaxPixels is the width*height above which an image is not decoded at all, so a small
	// file that claims to be huge (a decompression bomb) costs a header read; default 50e6.
	MaxPixels int64
	// MaxSide is the thumbnail's long side in px; default 320. Smaller images keep their size.
	MaxSide int
}

// Defaults of Limits.
const (
	DefaultMaxPixels = 50_000_000
	DefaultMaxSide   = 320
)

func (l Limits) withDefaults() Limits {
	if l.MaxPixels <= 0 {
		l.MaxPixels = DefaultMaxPixels
	}
	if l.MaxSide <= 0 {
		l.MaxSide = DefaultMaxSide
	}
	return l
}

// Thumb is a made thumbnail.
type Thumb struct {
	// JPEG is the thumbnail, upright (EXIF orientation applied), with no metadata at all:
	// the standard encoder writes no EXIF, GPS, ICC or XMP segment, so none of the
	// original's can survive.
	JPEG          []byte
	Width, Height int
	// Preview is a tiny placeholder a client shows before downloading anything: a
	// "data:image/jpeg;base64,..." URL of an image at most 32 px on the long side, the whole
	// URL under 1,500 bytes so it fits in a message.
	Preview string
}

// Errors of Thumbnail.
var (
	ErrNotImage      = errors.New("media: not an image this server thumbnails")
	ErrTooManyPixels = errors.New("media: image has more pixels than the limit") // decompression bomb: not decoded
)

const (
	thumbQuality   = 80
	previewSide    = 32
	previewMaxURL  = 1500
	previewPrefix  = "data:image/jpeg;base64,"
	decodeBufBytes = 64 << 10
)

// Thumbnail makes the thumbnail of an image (JPEG, PNG, GIF (first frame), WebP) whose Info
// Probe gave. It reads the header again rather than trusting info's size, and an image over
// lim.MaxPixels returns ErrTooManyPixels after reading only that header. Other types return
// ErrNotImage; a header or image that does not decode returns a wrapped decoder error.
//
// Memory: one decoded image at a time (for JPEG 1.5 bytes a pixel, 18 MB at 12 MP; for PNG,
// GIF and WebP up to 4 bytes a pixel, 8 for 16-bit PNG), plus a reduced copy of about
// (2*MaxSide)² pixels and one source row. The decoded image is dropped before the final
// resize and encode. CPU: about one core for the call; it is safe for concurrent use, and
// the caller should bound how many run at once.
func Thumbnail(r io.ReaderAt, size int64, info Info, lim Limits) (Thumb, error) {
	lim = lim.withDefaults()
	format, ok := formats[info.ContentType]
	if !ok {
		return Thumb{}, ErrNotImage
	}
	sr := io.NewSectionReader(r, 0, size)
	cfg, err := format.config(bufio.NewReaderSize(io.NewSectionReader(sr, 0, size), 4<<10))
	if err != nil {
		return Thumb{}, fmt.Errorf("media: image header: %w", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || int64(cfg.Width)*int64(cfg.Height) > lim.MaxPixels {
		return Thumb{}, ErrTooManyPixels
	}
	o := orientation(1)
	if info.ContentType == "image/jpeg" {
		o = jpegOrientation(sr)
	}
	img, err := format.decode(bufio.NewReaderSize(io.NewSectionReader(sr, 0, size), decodeBufBytes))
	if err != nil {
		return Thumb{}, fmt.Errorf("media: decode %s: %w", info.ContentType, err)
	}
	small := orient(reduce(img, boxFactor(img.Bounds(), lim.MaxSide)), o)
	img = nil // let the decoded image go before the resize and encodes
	out := resize(small, lim.MaxSide)
	t := Thumb{Width: out.Rect.Dx(), Height: out.Rect.Dy()}
	if t.JPEG, err = encodeJPEG(out, thumbQuality); err != nil {
		return Thumb{}, err
	}
	if t.Preview, err = preview(out); err != nil {
		return Thumb{}, err
	}
	return t, nil
}

// boxFactor is the integer factor of the box pre-reduction: as large as leaves at least twice
// the target long side, so the CatmullRom pass after it still has detail to filter, while
// the cost of that pass no longer depends on the source size. 1 means no reduction.
func boxFactor(b image.Rectangle, maxSide int) int {
	return max(1, max(b.Dx(), b.Dy())/(2*maxSide))
}

// fit returns w×h scaled so the long side is maxSide, never upscaled, each side at least 1.
func fit(w, h, maxSide int) (int, int) {
	long := max(w, h)
	if long <= maxSide {
		return w, h
	}
	return max(1, (w*maxSide+long/2)/long), max(1, (h*maxSide+long/2)/long)
}

// resize scales src down with CatmullRom so its long side is maxSide; src is returned as it
// is when it already fits.
func resize(src *image.RGBA, maxSide int) *image.RGBA {
	w, h := fit(src.Rect.Dx(), src.Rect.Dy(), maxSide)
	if w == src.Rect.Dx() && h == src.Rect.Dy() {
		return src
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.CatmullRom.Scale(dst, dst.Rect, src, src.Rect, draw.Src, nil)
	return dst
}

func encodeJPEG(img image.Image, quality int) ([]byte, error) {
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: quality}); err != nil {
		return nil, fmt.Errorf("media: encode jpeg: %w", err)
	}
	return buf.Bytes(), nil
}

// preview makes the data URL of Thumb.Preview, lowering the JPEG quality until the URL fits.
// The encoder's fixed tables are about 600 bytes, so the image data has a few hundred.
func preview(thumb *image.RGBA) (string, error) {
	small := resize(thumb, previewSide)
	for _, q := range []int{60, 45, 30, 15, 5} {
		b, err := encodeJPEG(small, q)
		if err != nil {
			return "", err
		}
		url := previewPrefix + base64.StdEncoding.EncodeToString(b)
		if len(url) < previewMaxURL {
			return url, nil
		}
	}
	return "", fmt.Errorf("media: preview over %d bytes", previewMaxURL)
}
