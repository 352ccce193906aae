package webtest

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestAttachments sends files as people do, through the paperclip's file input: an image
// shows the upload's progress to the end, then a message laid out from the metadata with
// its thumbnail loaded through a signed URL, for the sender and for the recipient in
// another browser profile; a click opens the full image. A file that is not an image shows
// as a card with its name, size and a download link that works without a token. Pasting an
// image and dropping a file send them too.
func TestAttachments(t *testing.T) {
	n := startNode(t)
	browser := newBrowser(t)
	dir := t.TempDir()
	photo := writePNG(t, filepath.Join(dir, "harbour.png"), 640, 480)
	notes := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notes, []byte(strings.Repeat("minutes of the meeting\n", 130)), 0o644); err != nil { // 2990 bytes
		t.Fatal(err)
	}

	n.devLogin("bob", "setup") // a direct chat needs bob to exist
	alice := newPage(t, browser, "alice/laptop", true)
	alice.signIn(n.url(), "alice", "laptop")
	direct := alice.newDirect("bob")
	alice.waitJS("the chat open", fmt.Sprintf(`document.getElementById('chat-view').dataset.conv === %q`, direct))
	bob := newPage(t, browser, "bob/laptop", true)
	bob.signIn(n.url(), "bob", "laptop")

	// Every state an upload's bar goes through, seen as the page renders it: the bar goes
	// away a little after the upload is done, so the test records rather than races it.
	alice.eval(`(() => {
		window.uploadSeen = [];
		const note = () => { for (const li of document.querySelectorAll('#uploads li.upload')) {
			const bar = li.querySelector('progress');
			const s = li.dataset.state + (bar && bar.value === bar.max ? ':full' : '');
			if (!window.uploadSeen.includes(s)) window.uploadSeen.push(s);
		} };
		new MutationObserver(note).observe(document.getElementById('uploads'), {subtree: true, childList: true, attributes: true});
		return true; })()`, nil)
	alice.do("pick the image", chromedp.SetUploadFiles(chromedp.ID("attach-input"), []string{photo}))
	alice.waitJS("the upload's progress to finish", `window.uploadSeen.includes('done:full')`)

	// The image message, for both: sized from the metadata (640x480 fits 280x210), the preview
	// painted, the thumbnail loaded from a signed URL.
	imageLoaded := `(() => { const li = [...document.querySelectorAll('#messages li.msg:not(.pending)')].find(li => li.querySelector('.att-image'));
		if (!li) return false;
		const box = li.querySelector('.att-image'), thumb = box.querySelector('img.att-thumb'), pre = box.querySelector('img.att-preview');
		return box.style.width === '280px' && box.style.height === '210px' && pre && pre.src.startsWith('data:image/jpeg') &&
			thumb.complete && thumb.naturalWidth > 0 && thumb.src.includes('/thumbnail?') && thumb.src.includes('sig='); })()`
	alice.waitJS("alice's image message with its thumbnail", imageLoaded)
	alice.waitJS("the image message acknowledged", `['sent', 'delivered', 'read'].includes(document.querySelector('#messages li.msg[data-seq="1"]')?.dataset.state)`)
	alice.screenshot("attachment-image-sender")
	bob.open(bob.convID("alice"))
	bob.waitJS("bob's image message with its thumbnail", imageLoaded)
	alice.waitJS("read by bob", `document.querySelector('#messages li.msg[data-seq="1"]')?.dataset.state === 'read'`)

	// A click opens the full image.
	bob.click("open the image", chromedp.CSS(`#messages .att-image`))
	bob.waitJS("the full image in the viewer", `document.getElementById('viewer').open &&
		document.getElementById('viewer-img').complete && document.getElementById('viewer-img').naturalWidth === 640 &&
		document.getElementById('viewer-img').src.includes('/content?')`)
	bob.screenshot("attachment-image-viewer")
	bob.do("close the viewer", chromedp.Click(chromedp.CSS(`#viewer button[type=submit]`)))
	bob.waitJS("the viewer closed", `!document.getElementById('viewer').open`)
	bob.waitJS("the list preview", `document.getElementById('conv-list').textContent.includes('Photo')`)

	// A file that is not an image: a card with its name, size and a signed download link.
	alice.do("pick the file", chromedp.SetUploadFiles(chromedp.ID("attach-input"), []string{notes}))
	card := `(() => { const c = [...document.querySelectorAll('#messages li.msg:not(.pending) .att-file')].find(c => c.querySelector('.att-name').textContent === 'notes.txt');
		return !!c && c.querySelector('.att-size').textContent.startsWith('2.9 KB') && (c.querySelector('a.att-download').href || '').includes('/content?'); })()`
	alice.waitJS("alice's file card", card)
	bob.waitJS("bob's file card", card)
	bob.screenshot("attachment-file")
	var body string
	bob.eval(`fetch([...document.querySelectorAll('#messages .att-file a.att-download')].at(-1).href, {credentials: 'omit'}).then(r => r.ok ? r.text() : 'HTTP ' + r.status)`, &body)
	if !strings.HasPrefix(body, "minutes of the meeting\n") || len(body) != 2990 {
		t.Fatalf("download through the card's link: %d bytes %.40q", len(body), body)
	}

	// What the server stored: an image (2) and a file (3) naming their attachments.
	msgs := n.history(n.devLogin("alice", "check"), direct)
	if len(msgs) != 2 {
		t.Fatalf("history: %+v", msgs)
	}
	for i, want := range []string{"harbour.png", "notes.txt"} {
		c, _ := msgs[i].Content.(map[string]any)
		if c["name"] != want || !strings.HasPrefix(fmt.Sprint(c["attachment_id"]), "a_") || c["attachment"] == nil {
			t.Errorf("message %d content = %v, want %s with its attachment", i+1, c, want)
		}
	}

	// Bob pastes an image into the message box and drops a file on the conversation (the
	// events a browser fires for them, with files made in the page).
	bob.eval(`(async () => {
		const c = document.createElement('canvas'); c.width = 300; c.height = 600;
		const g = c.getContext('2d'); g.fillStyle = '#3056d3'; g.fillRect(0, 0, 300, 600);
		const blob = await new Promise(r => c.toBlob(r, 'image/png'));
		const paste = new DataTransfer(); paste.items.add(new File([blob], 'image.png', {type: 'image/png'}));
		document.getElementById('composer-input').dispatchEvent(new ClipboardEvent('paste', {clipboardData: paste, bubbles: true, cancelable: true}));
		const drop = new DataTransfer(); drop.items.add(new File(['a,b\n1,2\n'], 'table.csv', {type: 'text/csv'}));
		const view = document.getElementById('chat-view');
		view.dispatchEvent(new DragEvent('dragover', {dataTransfer: drop, bubbles: true, cancelable: true}));
		view.dispatchEvent(new DragEvent('drop', {dataTransfer: drop, bubbles: true, cancelable: true}));
		return true; })()`, nil)
	alice.waitJS("the pasted image, tall, with its thumbnail", `(() => { const b = [...document.querySelectorAll('#messages li.msg:not(.pending) .att-image')].find(b => b.style.height === '280px');
		const th = b?.querySelector('img.att-thumb'); return !!th && b.style.width === '140px' && th.complete && th.naturalWidth > 0; })()`)
	alice.waitJS("the dropped file's card", `[...document.querySelectorAll('#messages .att-file .att-name')].some(e => e.textContent === 'table.csv')`)
	bob.waitJS("the drop highlight gone", `!document.getElementById('chat-view').classList.contains('dropping')`)
}

// writePNG writes a w x h PNG with a gradient (something a thumbnail can show) and returns its path.
func writePNG(t *testing.T, path string, w, h int) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), 160, 255})
		}
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	return path
}
