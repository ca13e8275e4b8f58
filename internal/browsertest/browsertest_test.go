package browsertest

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"testing"
)

// TestSmallPNG: at most 256 colours, the frequent ones exact, the rare
// ones their nearest.
func TestSmallPNG(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 100, 100))
	white, red := color.RGBA{255, 255, 255, 255}, color.RGBA{220, 38, 38, 255}
	for y := range 100 {
		for x := range 100 {
			c := white
			switch {
			case y < 30:
				c = red
			case y >= 90: // 1,000 pixels of 1,000 near-white colours
				c = color.RGBA{255, 255 - uint8(x/10), 255 - uint8(x%10*10+y-90), 255}
			}
			img.Set(x, y, c)
		}
	}
	var in bytes.Buffer
	if err := png.Encode(&in, img); err != nil {
		t.Fatal(err)
	}
	out, err := SmallPNG(in.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	got, err := png.Decode(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := got.(*image.Paletted)
	if !ok || len(p.Palette) != 256 {
		t.Fatalf("got %T, want a palette of 256 colours (of 1,002)", got)
	}
	for _, c := range []struct {
		x, y int
		want color.RGBA
	}{{0, 0, red}, {50, 50, white}} {
		if g := color.RGBAModel.Convert(got.At(c.x, c.y)); g != c.want {
			t.Errorf("(%d, %d) = %v, want %v", c.x, c.y, g, c.want)
		}
	}
	// A rare colour becomes a near one: not red.
	if r, g, _, _ := got.At(99, 99).RGBA(); r>>8 < 240 || g>>8 < 200 {
		t.Errorf("a rare near-white became %v", got.At(99, 99))
	}
	if _, err := SmallPNG([]byte("not a png")); err == nil {
		t.Error("SmallPNG took garbage")
	}
}
