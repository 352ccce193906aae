package media

import (
	"errors"
	"io"

	mp4 "github.com/abema/go-mp4"
)

// mp4Facts is what Probe learns from an ISO-BMFF (MP4, M4A, MOV) movie header.
type mp4Facts struct {
	width, height      int
	durationMS         int64
	hasVideo, hasAudio bool
}

func isMP4Family(contentType string) bool {
	switch contentType {
	case "video/mp4", "audio/mp4", "video/quicktime", "video/3gpp", "video/3gpp2":
		return true
	}
	return false
}

// maxHeaderBox bounds the payload of an mvhd, tkhd or hdlr box Probe will unmarshal: real
// ones are about 100 bytes, so a larger one is malformed and not worth reading.
const maxHeaderBox = 4 << 10

// errStop ends go-mp4's walk early; it is never returned from probeMP4.
var errStop = errors.New("media: stop")

// probeMP4 reads the moov box's mvhd (duration) and each trak's tkhd and hdlr (display size
// of the first video track, and whether there is video or sound at all). It descends only
// into moov, trak and mdia, so sample tables and media data are never read. A malformed file
// gives what was found before the malformation.
func probeMP4(sr *io.SectionReader) mp4Facts {
	var f mp4Facts
	var tk *mp4.Tkhd // the tkhd of the trak being walked
	handler := func(h *mp4.ReadHandle) (any, error) {
		switch h.BoxInfo.Type {
		case mp4.BoxTypeMoov(), mp4.BoxTypeTrak(), mp4.BoxTypeMdia():
			if h.BoxInfo.Type == mp4.BoxTypeTrak() {
				tk = nil
			}
			_, err := h.Expand()
			if h.BoxInfo.Type == mp4.BoxTypeMoov() && err == nil {
				return nil, errStop // one movie header is enough; skip what follows
			}
			return nil, err
		case mp4.BoxTypeMvhd(), mp4.BoxTypeTkhd(), mp4.BoxTypeHdlr():
			if h.BoxInfo.Size-h.BoxInfo.HeaderSize > maxHeaderBox {
				return nil, nil
			}
			box, _, err := h.ReadPayload()
			if err != nil {
				return nil, err
			}
			f.add(box, &tk)
		}
		return nil, nil
	}
	_, _ = mp4.ReadBoxStructure(sr, handler)
	return f
}

// add folds one header box into f. A tkhd is kept until its trak's hdlr says whether the
// track is video, since tkhd comes first in the trak.
func (f *mp4Facts) add(box mp4.IBox, tk **mp4.Tkhd) {
	switch b := box.(type) {
	case *mp4.Mvhd:
		if ts := uint64(b.Timescale); ts > 0 {
			d := b.GetDuration() // split so that d*1000 cannot overflow
			ms := d/ts*1000 + d%ts*1000/ts
			if ms <= 1<<53 && d != 1<<64-1 && d != 1<<32-1 { // all ones: duration unknown
				f.durationMS = int64(ms)
			}
		}
	case *mp4.Tkhd:
		*tk = b
	case *mp4.Hdlr:
		switch string(b.HandlerType[:]) {
		case "soun":
			f.hasAudio = true
		case "vide":
			if !f.hasVideo && *tk != nil {
				f.width, f.height = trackSize(*tk)
			}
			f.hasVideo = true
		}
	}
}

// trackSize returns a video track's display size: tkhd's 16.16 width and height, swapped when
// the matrix turns the picture a quarter (phones record portrait video this way).
func trackSize(tk *mp4.Tkhd) (w, h int) {
	w, h = int(tk.GetWidthInt()), int(tk.GetHeightInt())
	// Matrix is {a b u c d v x y w}; a quarter turn has a = d = 0 and b, c = ±1.
	if tk.Matrix[0] == 0 && tk.Matrix[4] == 0 && tk.Matrix[1] != 0 && tk.Matrix[3] != 0 {
		w, h = h, w
	}
	return w, h
}
