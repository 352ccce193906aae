package media

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"sync"

	exif "github.com/dsoprea/go-exif/v3"
	exifcommon "github.com/dsoprea/go-exif/v3/common"
)

// orientation is the EXIF Orientation tag (0x0112): how the stored pixels must be turned to be
// shown upright. 1 is upright; 2-8 are the mirrorings and quarter turns of the TIFF spec.
type orientation int

// swapsSides reports whether the upright image is the stored one on its side (5-8 transpose).
func (o orientation) swapsSides() bool { return o >= 5 && o <= 8 }

const (
	tagOrientation = 0x0112
	// maxMarkers bounds the JPEG segments read before giving up on finding EXIF: it sits in
	// APP1, among the first few segments, in every writer seen.
	maxMarkers = 32
)

var exifSignature = []byte("Exif\x00\x00")

// jpegOrientation returns the EXIF orientation of the JPEG sr holds, or 1 when it has none
// or it does not parse. It reads only the segments before the image data.
func jpegOrientation(sr *io.SectionReader) orientation {
	payload := jpegExifPayload(sr)
	if payload == nil {
		return 1
	}
	return exifOrientation(payload)
}

// jpegExifPayload walks the JPEG marker segments up to the start of scan and returns the TIFF
// data of the first APP1 "Exif" segment, or nil. Only the segment framing is read here; the
// EXIF itself is parsed by go-exif.
func jpegExifPayload(sr *io.SectionReader) []byte {
	var hdr [4]byte
	if _, err := sr.ReadAt(hdr[:2], 0); err != nil || hdr[0] != 0xFF || hdr[1] != 0xD8 {
		return nil
	}
	off := int64(2)
	for range maxMarkers {
		if _, err := sr.ReadAt(hdr[:], off); err != nil || hdr[0] != 0xFF {
			return nil
		}
		marker, n := hdr[1], int64(binary.BigEndian.Uint16(hdr[2:]))
		if marker == 0xDA || marker == 0xD9 || n < 2 { // start of scan, end of image
			return nil
		}
		if marker == 0xE1 && n >= 2+int64(len(exifSignature)) {
			seg := make([]byte, n-2) // at most 64 KiB: the length field is 16 bits
			if _, err := sr.ReadAt(seg, off+4); err != nil {
				return nil
			}
			if bytes.HasPrefix(seg, exifSignature) {
				return seg[len(exifSignature):]
			}
		}
		off += 2 + n
	}
	return nil
}

// exifIndex holds go-exif's tag tables, built once: they are read-only after loading.
var exifIndex = sync.OnceValues(func() (*exifcommon.IfdMapping, *exif.TagIndex) {
	m, err := exifcommon.NewIfdMappingWithStandard()
	if err != nil {
		panic(err) // the standard tables are compiled into go-exif
	}
	return m, exif.NewTagIndex()
})

// errFound stops go-exif's walk once the orientation has been read.
var errFound = errors.New("media: orientation found")

// exifOrientation reads the Orientation tag of IFD0 from TIFF-structured EXIF data, or 1.
func exifOrientation(tiff []byte) (o orientation) {
	o = 1
	defer func() {
		// go-exif reports most malformations as errors but is not fuzzed for every input;
		// a broken EXIF block must cost the photo its rotation, not the server its upload.
		if recover() != nil {
			o = 1
		}
	}()
	mapping, index := exifIndex()
	visit := func(ite *exif.IfdTagEntry) error {
		if ite.TagId() != tagOrientation || !ite.IfdIdentity().Equals(exifcommon.IfdStandardIfdIdentity) {
			return nil
		}
		// One SHORT by the spec; a forged count would make go-exif read count*2 bytes.
		if ite.UnitCount() != 1 {
			return errFound
		}
		if v, err := ite.Value(); err == nil {
			if s, ok := v.([]uint16); ok && len(s) > 0 && s[0] >= 1 && s[0] <= 8 {
				o = orientation(s[0])
			}
		}
		return errFound
	}
	_, _, _ = exif.Visit(exifcommon.IfdStandardIfdIdentity, mapping, index, tiff, visit, nil)
	return o
}
