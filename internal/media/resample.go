package media

import (
	"image"
	"image/color"

	"golang.org/x/image/draw"
)

// reduce shrinks src by the integer factor k, each output pixel the mean of a k×k block (the
// blocks on the right and bottom edges may be smaller), composited on white. It is the first
// of the two resize passes: an area average cannot alias, and it visits each source pixel
// once, where a kernel filter over 12 MP is several times slower. Besides the output it holds
// one source row, converted by image/draw's fast paths to premultiplied RGBA.
func reduce(src image.Image, k int) *image.RGBA {
	if y, ok := src.(*image.YCbCr); ok && k > 1 {
		return reduceYCbCr(y, k)
	}
	b := src.Bounds()
	ow, oh := (b.Dx()+k-1)/k, (b.Dy()+k-1)/k
	dst := image.NewRGBA(image.Rect(0, 0, ow, oh))
	row := image.NewRGBA(image.Rect(0, 0, b.Dx(), 1))
	sums := make([]uint32, 4*ow)
	for oy := range oh {
		clear(sums)
		y0 := b.Min.Y + oy*k
		y1 := min(y0+k, b.Max.Y)
		for y := y0; y < y1; y++ {
			draw.Draw(row, row.Rect, src, image.Pt(b.Min.X, y), draw.Src)
			sumRow(sums, row.Pix, k)
		}
		writeMeans(dst.Pix[oy*dst.Stride:], sums, k, b.Dx(), y1-y0)
	}
	return dst
}

// reduceYCbCr is reduce for a decoded JPEG: it averages the luma and chroma planes as they
// are and converts only the reduced pixels to RGB, where converting every source pixel first
// (image/draw's YCbCr path) cost as much as the averaging. The colour conversion is affine,
// so the mean of the converted pixels and the conversion of the means differ only by rounding
// and clamping.
func reduceYCbCr(src *image.YCbCr, k int) *image.RGBA {
	b := src.Bounds()
	hs, vs := chromaFactors(src.SubsampleRatio)
	ow, oh := (b.Dx()+k-1)/k, (b.Dy()+k-1)/k
	dst := image.NewRGBA(image.Rect(0, 0, ow, oh))
	ys := make([]uint32, ow)
	cbs, crs, cns := make([]uint32, ow), make([]uint32, ow), make([]uint32, ow)
	for oy := range oh {
		clear(ys)
		clear(cbs)
		clear(crs)
		clear(cns)
		y0 := b.Min.Y + oy*k
		y1 := min(y0+k, b.Max.Y)
		for y := y0; y < y1; y++ {
			row := src.Y[src.YOffset(b.Min.X, y):][:b.Dx()]
			for ox := range ow {
				var sum uint32
				for _, v := range row[ox*k : min((ox+1)*k, len(row))] {
					sum += uint32(v)
				}
				ys[ox] += sum
			}
		}
		// Each chroma sample counts as many times as it has luma samples in the block, as
		// it would converted pixel by pixel.
		for cy := y0 / vs; cy <= (y1-1)/vs; cy++ {
			base := (cy-src.Rect.Min.Y/vs)*src.CStride - src.Rect.Min.X/hs
			wy := uint32(min((cy+1)*vs, y1) - max(cy*vs, y0))
			for ox := range ow {
				x0 := b.Min.X + ox*k
				x1 := min(x0+k, b.Max.X)
				for cx := x0 / hs; cx <= (x1-1)/hs; cx++ {
					w := wy * uint32(min((cx+1)*hs, x1)-max(cx*hs, x0))
					cbs[ox] += w * uint32(src.Cb[base+cx])
					crs[ox] += w * uint32(src.Cr[base+cx])
					cns[ox] += w
				}
			}
		}
		out := dst.Pix[oy*dst.Stride:]
		for ox := range ow {
			n := uint32((y1 - y0) * (min((ox+1)*k, b.Dx()) - ox*k))
			r, g, bl := color.YCbCrToRGB(uint8((ys[ox]+n/2)/n), uint8((cbs[ox]+cns[ox]/2)/cns[ox]), uint8((crs[ox]+cns[ox]/2)/cns[ox]))
			out[4*ox], out[4*ox+1], out[4*ox+2], out[4*ox+3] = r, g, bl, 255
		}
	}
	return dst
}

// chromaFactors is how many luma samples, across and down, share one chroma sample.
func chromaFactors(r image.YCbCrSubsampleRatio) (h, v int) {
	switch r {
	case image.YCbCrSubsampleRatio422:
		return 2, 1
	case image.YCbCrSubsampleRatio420:
		return 2, 2
	case image.YCbCrSubsampleRatio440:
		return 1, 2
	case image.YCbCrSubsampleRatio411:
		return 4, 1
	case image.YCbCrSubsampleRatio410:
		return 4, 2
	}
	return 1, 1
}

// sumRow adds each k-pixel run of one RGBA row into its output pixel's four sums.
func sumRow(sums []uint32, pix []byte, k int) {
	for ox := 0; ox < len(sums)/4; ox++ {
		p := pix[4*ox*k : min(4*(ox+1)*k, len(pix))]
		var r, g, b, a uint32
		for i := 0; i+3 < len(p); i += 4 {
			r += uint32(p[i])
			g += uint32(p[i+1])
			b += uint32(p[i+2])
			a += uint32(p[i+3])
		}
		s := sums[4*ox : 4*ox+4 : 4*ox+4]
		s[0] += r
		s[1] += g
		s[2] += b
		s[3] += a
	}
}

// writeMeans writes one output row: each block's mean, composited on white. The sums are of
// premultiplied colour, so "over white" is the mean colour plus the mean transparency.
func writeMeans(out []byte, sums []uint32, k, srcW, rows int) {
	for ox := 0; ox < len(sums)/4; ox++ {
		n := uint32(rows * (min((ox+1)*k, srcW) - ox*k))
		s := sums[4*ox : 4*ox+4 : 4*ox+4]
		a := (s[3] + n/2) / n
		for c := range 3 {
			out[4*ox+c] = uint8(min(255, (s[c]+n/2)/n+255-a))
		}
		out[4*ox+3] = 255
	}
}

// orient returns src turned upright for EXIF orientation o (src itself for 1). Each case maps a
// pixel of the upright image to the stored one, per the TIFF/EXIF definitions of 2-8.
func orient(src *image.RGBA, o orientation) *image.RGBA {
	if o < 2 || o > 8 {
		return src
	}
	w, h := src.Rect.Dx(), src.Rect.Dy()
	dw, dh := w, h
	if o.swapsSides() {
		dw, dh = h, w
	}
	dst := image.NewRGBA(image.Rect(0, 0, dw, dh))
	for y := range dh {
		for x := range dw {
			sx, sy := storedPixel(o, x, y, w, h)
			si, di := src.PixOffset(sx, sy), dst.PixOffset(x, y)
			copy(dst.Pix[di:di+4], src.Pix[si:si+4])
		}
	}
	return dst
}

// storedPixel maps pixel (x, y) of the upright image to the stored image of size w×h.
func storedPixel(o orientation, x, y, w, h int) (int, int) {
	switch o {
	case 2: // mirrored left-right
		return w - 1 - x, y
	case 3: // turned 180°
		return w - 1 - x, h - 1 - y
	case 4: // mirrored top-bottom
		return x, h - 1 - y
	case 5: // transposed
		return y, x
	case 6: // shown after a quarter turn clockwise
		return y, h - 1 - x
	case 7: // transversed
		return w - 1 - y, h - 1 - x
	case 8: // shown after a quarter turn anticlockwise
		return w - 1 - y, x
	}
	return x, y
}
