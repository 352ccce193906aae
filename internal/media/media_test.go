package media

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/draw"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mp4 "github.com/abema/go-mp4"
	exif "github.com/dsoprea/go-exif/v3"
	exifcommon "github.com/dsoprea/go-exif/v3/common"
)

// photo is a photo-like test image: gradients with noise, so JPEG has real work to do.
func photo(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	rng := rand.New(rand.NewPCG(1, 2))
	for y := range h {
		for x := range w {
			n := int(rng.IntN(48)) - 24
			i := img.PixOffset(x, y)
			img.Pix[i] = clamp(x*255/w + n)
			img.Pix[i+1] = clamp(y*255/h + n)
			img.Pix[i+2] = clamp((x+y)*255/(w+h) - n)
			img.Pix[i+3] = 255
		}
	}
	return img
}

// fill sets b to pseudo-random bytes from seed.
func fill(b []byte, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

func clamp(v int) uint8 { return uint8(min(255, max(0, v))) }

func mustJPEG(tb testing.TB, img image.Image, quality int) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: quality}); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func mustPNG(tb testing.TB, img image.Image) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func mustGIF(tb testing.TB, img image.Image) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := gif.Encode(&buf, img, nil); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// withExif returns the JPEG with an APP1 EXIF segment holding orientation o and, when gps, a
// GPS IFD, built with go-exif as a camera would write them.
func withExif(tb testing.TB, jpg []byte, o int, gps bool) []byte {
	tb.Helper()
	mapping, index := exifIndex()
	ib := exif.NewIfdBuilder(mapping, index, exifcommon.IfdStandardIfdIdentity, binary.BigEndian)
	if err := ib.AddStandardWithName("Orientation", []uint16{uint16(o)}); err != nil {
		tb.Fatal(err)
	}
	if gps {
		g := exif.NewIfdBuilder(mapping, index, exifcommon.IfdGpsInfoStandardIfdIdentity, binary.BigEndian)
		if err := g.AddStandardWithName("GPSLatitudeRef", "N"); err != nil {
			tb.Fatal(err)
		}
		if err := ib.AddChildIb(g); err != nil {
			tb.Fatal(err)
		}
	}
	tiff, err := exif.NewIfdByteEncoder().EncodeToExif(ib)
	if err != nil {
		tb.Fatal(err)
	}
	seg := append(append([]byte{}, exifSignature...), tiff...)
	out := []byte{0xFF, 0xD8, 0xFF, 0xE1, byte((len(seg) + 2) >> 8), byte(len(seg) + 2)}
	out = append(out, seg...)
	return append(out, jpg[2:]...)
}

// pngBomb is a PNG whose header claims w×h pixels and whose data is absent: DecodeConfig reads
// only the signature and IHDR.
func pngBomb(w, h uint32) []byte {
	ihdr := make([]byte, 0, 17)
	ihdr = append(ihdr, "IHDR"...)
	ihdr = binary.BigEndian.AppendUint32(ihdr, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, 8, 6, 0, 0, 0) // 8-bit RGBA
	out := []byte("\x89PNG\r\n\x1a\n")
	out = binary.BigEndian.AppendUint32(out, 13)
	out = append(out, ihdr...)
	out = binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(ihdr))
	return append(out, make([]byte, 4096)...)
}

// movie builds an MP4 with an mvhd of durationMS and one track per handler type ("vide" tracks
// w×h, turned a quarter when rotated), using go-mp4's writer.
func movie(tb testing.TB, brand string, durationMS uint32, w, h uint32, rotated bool, handlers ...string) []byte {
	tb.Helper()
	f, err := os.Create(filepath.Join(tb.TempDir(), "m.mp4"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	wr := mp4.NewWriter(f)
	box := func(t mp4.BoxType, payload mp4.IImmutableBox, children func()) {
		if _, err := wr.StartBox(&mp4.BoxInfo{Type: t}); err != nil {
			tb.Fatal(err)
		}
		if payload != nil {
			if _, err := mp4.Marshal(wr, payload, mp4.Context{}); err != nil {
				tb.Fatal(err)
			}
		}
		if children != nil {
			children()
		}
		if _, err := wr.EndBox(); err != nil {
			tb.Fatal(err)
		}
	}
	var b [4]byte
	copy(b[:], brand)
	box(mp4.BoxTypeFtyp(), &mp4.Ftyp{MajorBrand: b, CompatibleBrands: []mp4.CompatibleBrandElem{{CompatibleBrand: b}}}, nil)
	box(mp4.BoxTypeMoov(), nil, func() {
		box(mp4.BoxTypeMvhd(), &mp4.Mvhd{Timescale: 1000, DurationV0: durationMS, Rate: 0x10000, Volume: 0x100, NextTrackID: 2}, nil)
		for _, hd := range handlers {
			tk := &mp4.Tkhd{FullBox: mp4.FullBox{Flags: [3]byte{0, 0, 3}}, TrackID: 1,
				Matrix: [9]int32{0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000}}
			if hd == "vide" {
				tk.Width, tk.Height = w<<16, h<<16
				if rotated {
					tk.Matrix = [9]int32{0, 0x10000, 0, -0x10000, 0, 0, 0, 0, 0x40000000}
				}
			}
			var ht [4]byte
			copy(ht[:], hd)
			box(mp4.BoxTypeTrak(), nil, func() {
				box(mp4.BoxTypeTkhd(), tk, nil)
				box(mp4.BoxTypeMdia(), nil, func() {
					box(mp4.BoxTypeHdlr(), &mp4.Hdlr{HandlerType: ht, Name: "h"}, nil)
				})
			})
		}
	})
	box(mp4.BoxTypeMdat(), nil, func() { _, _ = wr.Write(make([]byte, 64)) })
	data, err := os.ReadFile(f.Name())
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func mustRead(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func probe(tb testing.TB, b []byte) Info {
	tb.Helper()
	info, err := Probe(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		tb.Fatal(err)
	}
	return info
}

func TestProbe(t *testing.T) {
	img := photo(64, 48)
	random := make([]byte, 4096)
	fill(random, 3)
	tests := []struct {
		name string
		data []byte
		want Info
	}{
		{"jpeg", mustJPEG(t, img, 90), Info{ContentType: "image/jpeg", Width: 64, Height: 48}},
		{"jpeg orientation 6", withExif(t, mustJPEG(t, img, 90), 6, false), Info{ContentType: "image/jpeg", Width: 48, Height: 64}},
		{"jpeg orientation 3", withExif(t, mustJPEG(t, img, 90), 3, true), Info{ContentType: "image/jpeg", Width: 64, Height: 48}},
		{"png", mustPNG(t, img), Info{ContentType: "image/png", Width: 64, Height: 48}},
		{"gif", mustGIF(t, img), Info{ContentType: "image/gif", Width: 64, Height: 48}},
		{"webp lossless", mustRead(t, "alpha.webp"), Info{ContentType: "image/webp", Width: 40, Height: 30}},
		{"webp lossy", mustRead(t, "lossy.webp"), Info{ContentType: "image/webp", Width: 40, Height: 30}},
		{"png bomb", pngBomb(100000, 100000), Info{ContentType: "image/png", Width: 100000, Height: 100000}},
		{"svg", []byte(`<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`), Info{ContentType: "image/svg+xml"}},
		{"html", []byte("<!DOCTYPE html><html><body><script>alert(1)</script></body></html>"), Info{ContentType: "text/html"}},
		{"pdf", []byte("%PDF-1.7\n1 0 obj\n<<>>\nendobj\n"), Info{ContentType: "application/pdf"}},
		{"mp4", movie(t, "isom", 12345, 1920, 1080, false, "vide", "soun"), Info{ContentType: "video/mp4", Width: 1920, Height: 1080, DurationMS: 12345}},
		{"mp4 portrait", movie(t, "isom", 2000, 1920, 1080, true, "vide"), Info{ContentType: "video/mp4", Width: 1080, Height: 1920, DurationMS: 2000}},
		{"mp4 sound only", movie(t, "isom", 61000, 0, 0, false, "soun"), Info{ContentType: "audio/mp4", DurationMS: 61000}},
		{"m4a", movie(t, "M4A ", 3000, 0, 0, false, "soun"), Info{ContentType: "audio/mp4", DurationMS: 3000}},
		{"mov", movie(t, "qt  ", 4500, 640, 480, false, "vide"), Info{ContentType: "video/quicktime", Width: 640, Height: 480, DurationMS: 4500}},
		{"random", random, Info{ContentType: OctetStream}},
		{"empty", nil, Info{ContentType: "text/plain"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := probe(t, tt.data); got != tt.want {
				t.Errorf("Probe = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// failingReader fails every read past the first 16 bytes, like a disk going bad.
type failingReader struct{ b []byte }

var errDisk = errors.New("disk")

func (f failingReader) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > 16 {
		return 0, errDisk
	}
	return copy(p, f.b[off:]), nil
}

func TestProbeReadError(t *testing.T) {
	b := mustPNG(t, photo(8, 8))
	if _, err := Probe(failingReader{b}, int64(len(b))); !errors.Is(err, errDisk) {
		t.Fatalf("Probe err = %v, want %v", err, errDisk)
	}
}

func thumb(tb testing.TB, b []byte, lim Limits) Thumb {
	tb.Helper()
	th, err := Thumbnail(bytes.NewReader(b), int64(len(b)), probe(tb, b), lim)
	if err != nil {
		tb.Fatal(err)
	}
	return th
}

func decodeJPEG(tb testing.TB, b []byte) image.Image {
	tb.Helper()
	img, err := jpeg.Decode(bytes.NewReader(b))
	if err != nil {
		tb.Fatal(err)
	}
	return img
}

func TestThumbnailSizes(t *testing.T) {
	tests := []struct {
		name       string
		data       []byte
		lim        Limits
		wantW, wnH int
	}{
		{"landscape jpeg", mustJPEG(t, photo(1000, 500), 90), Limits{}, 320, 160},
		{"portrait png", mustPNG(t, photo(300, 900)), Limits{}, 107, 320},
		{"small gif is not upscaled", mustGIF(t, photo(50, 40)), Limits{}, 50, 40},
		{"webp", mustRead(t, "lossy.webp"), Limits{MaxSide: 20}, 20, 15},
		{"max side", mustJPEG(t, photo(2000, 1000), 90), Limits{MaxSide: 100}, 100, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := thumb(t, tt.data, tt.lim)
			b := decodeJPEG(t, th.JPEG).Bounds()
			if th.Width != tt.wantW || th.Height != tt.wnH || b.Dx() != tt.wantW || b.Dy() != tt.wnH {
				t.Errorf("thumb %dx%d (jpeg %v), want %dx%d", th.Width, th.Height, b, tt.wantW, tt.wnH)
			}
		})
	}
}

// marked is a 400×200 image, red on its left half and blue on its right, so where red ends up
// says how the thumbnail was turned.
func marked() *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, 400, 200))
	for y := range 200 {
		for x := range 400 {
			c := color.RGBA{0, 0, 255, 255}
			if x < 200 {
				c = color.RGBA{255, 0, 0, 255}
			}
			img.SetRGBA(x, y, c)
		}
	}
	return img
}

func isRed(c color.Color) bool {
	r, _, b, _ := c.RGBA()
	return r > 0xC000 && b < 0x4000
}

func TestThumbnailOrientation(t *testing.T) {
	// Red is the stored left half. Where it lands in the upright thumbnail (sampled a
	// quarter in from each corner: top-left, top-right, bottom-left) for each orientation.
	tests := []struct {
		o          int
		w, h       int
		tl, tr, bl bool
	}{
		{1, 320, 160, true, false, true},
		{2, 320, 160, false, true, false},
		{3, 320, 160, false, true, false},
		{4, 320, 160, true, false, true},
		{5, 160, 320, true, true, false},
		{6, 160, 320, true, true, false},
		{7, 160, 320, false, false, true},
		{8, 160, 320, false, false, true},
	}
	src := mustJPEG(t, marked(), 95)
	for _, tt := range tests {
		t.Run(string(rune('0'+tt.o)), func(t *testing.T) {
			th := thumb(t, withExif(t, src, tt.o, false), Limits{})
			img := decodeJPEG(t, th.JPEG)
			if th.Width != tt.w || th.Height != tt.h {
				t.Fatalf("size %dx%d, want %dx%d", th.Width, th.Height, tt.w, tt.h)
			}
			qx, qy := tt.w/4, tt.h/4
			got := [3]bool{isRed(img.At(qx, qy)), isRed(img.At(tt.w-qx, qy)), isRed(img.At(qx, tt.h-qy))}
			if want := [3]bool{tt.tl, tt.tr, tt.bl}; got != want {
				t.Errorf("red at (top-left, top-right, bottom-left) = %v, want %v", got, want)
			}
		})
	}
}

func TestThumbnailStripsMetadata(t *testing.T) {
	src := withExif(t, mustJPEG(t, photo(800, 600), 90), 1, true)
	if !bytes.Contains(src, []byte("Exif")) {
		t.Fatal("fixture has no EXIF")
	}
	th := thumb(t, src, Limits{})
	for _, s := range []string{"Exif", "GPS", "ICC_PROFILE", "http://ns.adobe.com"} {
		if bytes.Contains(th.JPEG, []byte(s)) {
			t.Errorf("thumbnail contains %q", s)
		}
	}
}

func TestThumbnailTransparentOnWhite(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 100, 100)) // fully transparent black
	th := thumb(t, mustPNG(t, img), Limits{})
	r, g, b, _ := decodeJPEG(t, th.JPEG).At(50, 50).RGBA()
	if r < 0xF000 || g < 0xF000 || b < 0xF000 {
		t.Errorf("transparent pixel = %x %x %x, want white", r, g, b)
	}
	// The lossless WebP fixture is transparent on its left half.
	th = thumb(t, mustRead(t, "alpha.webp"), Limits{})
	if r, _, _, _ := decodeJPEG(t, th.JPEG).At(2, 15).RGBA(); r < 0xF000 {
		t.Errorf("transparent webp pixel red = %x, want white", r)
	}
}

func TestThumbnailPreview(t *testing.T) {
	for _, name := range []string{"photo", "noise"} {
		t.Run(name, func(t *testing.T) {
			img := photo(1200, 900)
			if name == "noise" {
				fill(img.Pix, 5)
			}
			th := thumb(t, mustJPEG(t, img, 90), Limits{})
			if len(th.Preview) >= 1500 {
				t.Errorf("preview is %d bytes", len(th.Preview))
			}
			b64, ok := strings.CutPrefix(th.Preview, "data:image/jpeg;base64,")
			if !ok {
				t.Fatalf("preview %.40q is not a JPEG data URL", th.Preview)
			}
			raw, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				t.Fatal(err)
			}
			if b := decodeJPEG(t, raw).Bounds(); max(b.Dx(), b.Dy()) > 32 {
				t.Errorf("preview is %v", b)
			}
		})
	}
}

func TestThumbnailBomb(t *testing.T) {
	bomb := pngBomb(100000, 100000)
	r := bytes.NewReader(bomb)
	info := probe(t, bomb)
	var err error
	allocs := testing.AllocsPerRun(10, func() {
		_, err = Thumbnail(r, int64(len(bomb)), info, Limits{})
	})
	if !errors.Is(err, ErrTooManyPixels) {
		t.Fatalf("err = %v, want ErrTooManyPixels", err)
	}
	if allocs > 50 {
		t.Errorf("%v allocations for a bomb", allocs)
	}
	var before, after runtimeMem
	before.read()
	_, _ = Thumbnail(r, int64(len(bomb)), info, Limits{})
	after.read()
	if n := after.total - before.total; n > 1<<20 {
		t.Errorf("allocated %d bytes for a bomb", n)
	}
}

func TestThumbnailNotImage(t *testing.T) {
	for _, ct := range []string{"image/svg+xml", "application/pdf", "video/mp4", OctetStream} {
		if _, err := Thumbnail(bytes.NewReader(nil), 0, Info{ContentType: ct}, Limits{}); !errors.Is(err, ErrNotImage) {
			t.Errorf("%s: err = %v, want ErrNotImage", ct, err)
		}
	}
}

func TestInlineAndKind(t *testing.T) {
	tests := []struct {
		ct     string
		inline bool
		kind   int
	}{
		{"image/jpeg", true, KindImage},
		{"image/png", true, KindImage},
		{"image/webp", true, KindImage},
		{"Image/GIF", true, KindImage},
		{"audio/mpeg", true, KindAudio},
		{"audio/mp4", true, KindAudio},
		{"audio/ogg", true, KindAudio},
		{"video/mp4", true, KindVideo},
		{"video/quicktime", true, KindVideo},
		{"video/webm", true, KindVideo},
		{"image/svg+xml", false, KindFile},
		{"text/html", false, KindFile},
		{"text/html; charset=utf-8", false, KindFile},
		{"application/pdf", false, KindFile},
		{"application/javascript", false, KindFile},
		{"text/javascript", false, KindFile},
		{"text/xml", false, KindFile},
		{"application/xml", false, KindFile},
		{"application/xhtml+xml", false, KindFile},
		{"image/tiff", false, KindFile},
		{OctetStream, false, KindFile},
		{"", false, KindFile},
	}
	for _, tt := range tests {
		if got := Inline(tt.ct); got != tt.inline {
			t.Errorf("Inline(%q) = %v, want %v", tt.ct, got, tt.inline)
		}
		if got := Kind(tt.ct); got != tt.kind {
			t.Errorf("Kind(%q) = %d, want %d", tt.ct, got, tt.kind)
		}
	}
}

func FuzzProbe(f *testing.F) {
	img := photo(16, 12)
	f.Add(withExif(f, mustJPEG(f, img, 80), 6, true))
	f.Add(mustPNG(f, img))
	f.Add(mustGIF(f, img))
	f.Add(mustRead(f, "alpha.webp"))
	f.Add(mustRead(f, "lossy.webp"))
	f.Add(movie(f, "isom", 1000, 320, 240, true, "vide", "soun"))
	f.Add(movie(f, "M4A ", 1000, 0, 0, false, "soun"))
	f.Add(pngBomb(100000, 100000)[:64])
	f.Add([]byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`))
	f.Add([]byte("<!DOCTYPE html><html></html>"))
	f.Add([]byte("%PDF-1.4\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := Probe(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("Probe of bytes in memory failed: %v", err)
		}
		if info.ContentType == "" || strings.Contains(info.ContentType, ";") {
			t.Fatalf("content type %q", info.ContentType)
		}
		if info.Width < 0 || info.Height < 0 || info.DurationMS < 0 {
			t.Fatalf("negative info %+v", info)
		}
	})
}

// TestReduceYCbCrMatchesRGBA holds the YCbCr fast path of reduce to the general one (convert
// every pixel, then average), within rounding, for every chroma subsampling and a size that
// leaves partial blocks at the edges. (Where a conversion clamps, the mean of the converted
// pixels and the conversion of the means part by more: the test keeps to colours that do not.)
func TestReduceYCbCrMatchesRGBA(t *testing.T) {
	for _, ratio := range []image.YCbCrSubsampleRatio{image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio422,
		image.YCbCrSubsampleRatio420, image.YCbCrSubsampleRatio440, image.YCbCrSubsampleRatio411, image.YCbCrSubsampleRatio410} {
		src := image.NewYCbCr(image.Rect(0, 0, 203, 157), ratio)
		for y := range 157 {
			for x := range 203 {
				src.Y[src.YOffset(x, y)] = uint8(48 + (3*x+5*y)%128) // a photo's range: no clamping in the conversion
			}
		}
		for i := range src.Cb {
			src.Cb[i], src.Cr[i] = uint8(112+i%32), uint8(144-i%32)
		}
		rgba := image.NewRGBA(src.Rect)
		draw.Draw(rgba, rgba.Rect, src, image.Point{}, draw.Src)
		fast, slow := reduce(src, 8), reduce(rgba, 8)
		if fast.Rect != slow.Rect {
			t.Fatalf("%v: %v, want %v", ratio, fast.Rect, slow.Rect)
		}
		for i := range fast.Pix {
			if d := int(fast.Pix[i]) - int(slow.Pix[i]); d < -3 || d > 3 {
				t.Fatalf("%v: byte %d is %d, want %d within 3", ratio, i, fast.Pix[i], slow.Pix[i])
			}
		}
	}
}
