// Package browsertest runs the web pages' tests in a real headless Chromium
// (Debian's chromium, driven with chromedp): one browser per test binary,
// started from TestMain, a tab per test. Where no Chromium is installed the
// tests skip, unless ELASTICDL_REQUIRE_BROWSER=1 (the suite's hack/test.sh,
// which installs it) makes that a failure.
package browsertest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// RequireEnv makes a missing browser a test failure instead of a skip.
const RequireEnv = "ELASTICDL_REQUIRE_BROWSER"

// Width and Height are the window's size, and so the screenshots'.
const (
	Width  = 1100
	Height = 800
)

// Browser is one running Chromium; nil when none is installed (Tab skips).
type Browser struct {
	ctx    context.Context // the browser's: tabs derive from it
	cancel func()
	err    error // why there is no browser
}

// Exec is the Chromium binary: $ELASTICDL_CHROMIUM, else Debian's.
func Exec() (string, error) {
	if p := os.Getenv("ELASTICDL_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium: install Debian's chromium (hack/deps.sh --pytorch does) or set ELASTICDL_CHROMIUM")
}

// Launch starts the browser. With none installed it returns a Browser
// whose tabs skip (or fail, under RequireEnv); call Close when done.
func Launch() *Browser {
	path, err := Exec()
	if err != nil {
		return &Browser{err: err, cancel: func() {}}
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("headless", "new"),
		chromedp.WindowSize(Width, Height),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	// The first Run starts the process: an error here is the browser's.
	if err := chromedp.Do(bctx); err != nil {
		bcancel()
		acancel()
		return &Browser{err: fmt.Errorf("start %s: %w", path, err), cancel: func() {}}
	}
	return &Browser{ctx: bctx, cancel: func() { bcancel(); acancel() }}
}

// Close stops the browser.
func (b *Browser) Close() { b.cancel() }

// Tab opens a new tab for t, closed when t ends, with every action bounded
// by timeout. It skips t when there is no browser (fails under RequireEnv).
func (b *Browser) Tab(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	if b == nil || b.ctx == nil {
		why := "no browser"
		if b != nil {
			why = b.err.Error()
		}
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s (%s=1)", why, RequireEnv)
		}
		t.Skip(why)
	}
	tab, cancel := chromedp.NewContext(b.ctx)
	// The tab opens on its context's first use, which must not carry the
	// timeout (it would bound the tab's life, not the actions').
	if err := chromedp.Do(tab); err != nil {
		cancel()
		t.Fatalf("open a tab: %v", err)
	}
	ctx, stop := context.WithTimeout(tab, timeout)
	t.Cleanup(func() { stop(); cancel() })
	return ctx
}

// Screenshot writes the whole page as a PNG to dir/name and returns the
// path.
func Screenshot(ctx context.Context, dir, name string) (string, error) {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG; less is JPEG
	if err != nil {
		return "", fmt.Errorf("screenshot: %w", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return "", fmt.Errorf("screenshot: %w", err)
	}
	return path, nil
}

// SmallPNG re-encodes a screenshot with at most 256 colours, its most
// frequent ones, every other pixel taking the nearest of them, at the best
// compression: the pages' flat colours stay exact and only the edges of
// anti-aliased text and lines shift, for a file a quarter of the size.
func SmallPNG(data []byte) ([]byte, error) {
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("read the screenshot: %w", err)
	}
	b := img.Bounds()
	counts := map[color.RGBA]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			counts[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	cols := make([]color.RGBA, 0, len(counts))
	for c := range counts {
		cols = append(cols, c)
	}
	slices.SortFunc(cols, func(a, b color.RGBA) int {
		return cmp.Or(counts[b]-counts[a], cmp.Compare(a.R, b.R), cmp.Compare(a.G, b.G), cmp.Compare(a.B, b.B), cmp.Compare(a.A, b.A))
	})
	pal := make(color.Palette, 0, 256)
	for _, c := range cols[:min(256, len(cols))] {
		pal = append(pal, c)
	}
	out := image.NewPaletted(b, pal)
	near := map[color.RGBA]uint8{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			i, ok := near[c]
			if !ok {
				i = uint8(pal.Index(c))
				near[c] = i
			}
			out.SetColorIndex(x, y, i)
		}
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&buf, out); err != nil {
		return nil, fmt.Errorf("encode the screenshot: %w", err)
	}
	return buf.Bytes(), nil
}
