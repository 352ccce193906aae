package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleychat/parley/client"
)

// attachUpload is one file the crash test uploads: its bytes and what the server answered.
type attachUpload struct {
	id       string
	data     []byte
	complete bool // the PATCH of its last byte answered 204: the file is durable
	clientID string
	acked    bool // the message carrying it was acked
	seq      int64
}

// TestCrashDuringUploads SIGKILLs a node while users upload files and send messages that
// carry them. After a restart on the same data directory every acked message is there once,
// every message that names an attachment can download it byte for byte, every upload the
// server completed is still complete, and every upload cut short resumes from the offset the
// server reports and completes.
func TestCrashDuringUploads(t *testing.T) {
	if testing.Short() {
		t.Skip("runs subprocess nodes; skipped in -short mode")
	}
	dir := t.TempDir()
	args := []string{"--admin-secret", crashAdminSecret, "--send-rate", "0", "--request-rate", "0"}
	srv := startServe(t, dir, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tokens := mintUsers(ctx, t, srv.URL, crashAdminSecret, "alice", "bob")
	alice := tokens[0]
	conv, err := client.New(client.Options{BaseURL: srv.URL, Token: alice, UserID: "alice"}).CreateDirect(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}

	const workers, killAfter = 4, 24
	var (
		mu      sync.Mutex
		uploads []*attachUpload
		acks    atomic.Int64
		killed  = make(chan struct{})
		wg      sync.WaitGroup
	)
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 10 * time.Second}
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; ; i++ {
				select {
				case <-killed:
					return
				default:
				}
				u := &attachUpload{data: make([]byte, 64<<10+rng.IntN(1<<20)), clientID: fmt.Sprintf("w%d-%d", w, i)}
				for j := range u.data {
					u.data[j] = byte(rng.Uint32())
				}
				id, err := tusCreate(hc, srv.URL, alice, len(u.data))
				if err != nil {
					return
				}
				u.id = id
				mu.Lock()
				uploads = append(uploads, u)
				mu.Unlock()
				if _, err := tusPatch(hc, srv.URL, alice, id, 0, u.data); err != nil {
					return
				}
				mu.Lock()
				u.complete = true
				mu.Unlock()
				seq, err := sendCarrying(hc, srv.URL, alice, conv.ConvID, u.clientID, id)
				if err != nil {
					return
				}
				mu.Lock()
				u.acked, u.seq = true, seq
				mu.Unlock()
				acks.Add(1)
			}
		})
	}
	// One more upload stalls halfway through its PATCH until the kill: cut short for sure.
	stalled := &attachUpload{data: make([]byte, 3<<20), clientID: "stalled"}
	for j := range stalled.data {
		stalled.data[j] = byte(j * 7)
	}
	if stalled.id, err = tusCreate(hc, srv.URL, alice, len(stalled.data)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	uploads = append(uploads, stalled)
	mu.Unlock()
	half := make(chan struct{})
	wg.Go(func() {
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(stalled.data[:len(stalled.data)/2])
			close(half)
			<-killed
			pw.CloseWithError(io.ErrUnexpectedEOF)
		}()
		_, _ = tusDo(hc, "PATCH", srv.URL+"/v1/uploads/"+stalled.id, alice, pr, http.Header{
			"Upload-Offset": {"0"}, "Content-Type": {"application/offset+octet-stream"}})
	})
	<-half
	deadline := time.NewTimer(60 * time.Second)
	for acks.Load() < killAfter {
		select {
		case <-deadline.C:
			t.Fatalf("only %d acks within 60s", acks.Load())
		case <-time.After(5 * time.Millisecond):
		}
	}
	deadline.Stop()
	srv.kill()
	close(killed)
	wg.Wait()

	srv = startServe(t, dir, args...)
	mu.Lock()
	defer mu.Unlock()
	// Every message in the conversation: acked ones once, and each names a durable file.
	c := client.New(client.Options{BaseURL: srv.URL, Token: tokens[1], UserID: "bob"})
	page, err := c.History(ctx, conv.ConvID, client.HistoryQuery{Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	byClient := map[string]int{}
	for _, m := range page.Messages {
		byClient[m.ClientMsgID]++
		var content struct {
			AttachmentID string `json:"attachment_id"`
			Attachment   struct {
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			} `json:"attachment"`
		}
		if err := json.Unmarshal(m.Content, &content); err != nil || content.AttachmentID == "" {
			t.Fatalf("message %d: content %s", m.Seq, m.Content)
		}
		got, err := download(hc, srv.URL, tokens[1], content.AttachmentID)
		if err != nil {
			t.Errorf("message %d names %s, which cannot be downloaded: %v", m.Seq, content.AttachmentID, err)
			continue
		}
		if sum := sha256.Sum256(got); hex.EncodeToString(sum[:]) != content.Attachment.SHA256 || int64(len(got)) != content.Attachment.Size {
			t.Errorf("message %d: downloaded %d bytes that are not the file its metadata describes", m.Seq, len(got))
		}
	}
	var acked, resumed int
	for _, u := range uploads {
		if u.acked {
			acked++
			if byClient[u.clientID] != 1 {
				t.Errorf("acked message %s (seq %d) is stored %d times", u.clientID, u.seq, byClient[u.clientID])
			}
		}
		if !u.complete {
			// Cut short by the kill: it resumes from what the server holds.
			off, err := tusOffset(hc, srv.URL, alice, u.id)
			if err != nil {
				t.Errorf("upload %s after the restart: %v", u.id, err)
				continue
			}
			if off < int64(len(u.data)) {
				if _, err := tusPatch(hc, srv.URL, alice, u.id, off, u.data[off:]); err != nil {
					t.Errorf("resume %s from %d: %v", u.id, off, err)
					continue
				}
			}
			resumed++
		}
		got, err := download(hc, srv.URL, alice, u.id)
		if err != nil || !bytes.Equal(got, u.data) {
			t.Errorf("upload %s (complete before the kill: %v): %d bytes back, %v", u.id, u.complete, len(got), err)
		}
	}
	if resumed == 0 {
		t.Error("no upload was cut short by the kill: the stalled one should have been")
	}
	if acked < killAfter {
		t.Errorf("%d acks recorded, want at least %d", acked, killAfter)
	}
	t.Logf("%d uploads, %d acked messages, %d resumed after the kill", len(uploads), acked, resumed)
}

// tusCreate starts an upload of size bytes and returns its id.
func tusCreate(hc *http.Client, base, token string, size int) (string, error) {
	resp, err := tusDo(hc, "POST", base+"/v1/uploads", token, nil, http.Header{"Upload-Length": {strconv.Itoa(size)}})
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("POST /v1/uploads = %d", resp.StatusCode)
	}
	return path.Base(resp.Header.Get("Location")), nil
}

// tusPatch sends data from offset and returns the new offset.
func tusPatch(hc *http.Client, base, token, id string, offset int64, data []byte) (int64, error) {
	resp, err := tusDo(hc, "PATCH", base+"/v1/uploads/"+id, token, bytes.NewReader(data), http.Header{
		"Upload-Offset": {strconv.FormatInt(offset, 10)}, "Content-Type": {"application/offset+octet-stream"}})
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusNoContent {
		return 0, fmt.Errorf("PATCH = %d", resp.StatusCode)
	}
	return strconv.ParseInt(resp.Header.Get("Upload-Offset"), 10, 64)
}

// tusOffset asks how much of upload id the server holds.
func tusOffset(hc *http.Client, base, token, id string) (int64, error) {
	resp, err := tusDo(hc, "HEAD", base+"/v1/uploads/"+id, token, nil, nil)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("HEAD = %d", resp.StatusCode)
	}
	return strconv.ParseInt(resp.Header.Get("Upload-Offset"), 10, 64)
}

func tusDo(hc *http.Client, method, url, token string, body io.Reader, h http.Header) (*http.Response, error) {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Tus-Resumable", "1.0.0")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// sendCarrying sends a file message carrying attachment id and returns its seq.
func sendCarrying(hc *http.Client, base, token, convID, clientID, id string) (int64, error) {
	return postMessage(hc, base, token, map[string]any{"conv_id": convID, "client_msg_id": clientID, "content_type": 3,
		"content": map[string]any{"attachment_id": id, "name": clientID + ".bin"}})
}

// postMessage sends one message over HTTP, once, without the SDK's retries (which would
// wait out a killed server), and returns its seq.
func postMessage(hc *http.Client, base, token string, msg map[string]any) (int64, error) {
	body, _ := json.Marshal(msg)
	req, err := http.NewRequest("POST", base+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var ack struct {
		Seq int64 `json:"seq"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("send = %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&ack); err != nil {
		return 0, err
	}
	return ack.Seq, nil
}

// download returns attachment id's bytes.
func download(hc *http.Client, base, token, id string) ([]byte, error) {
	req, err := http.NewRequest("GET", base+"/v1/attachments/"+id+"/content", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET content = %d", resp.StatusCode)
	}
	return io.ReadAll(resp.Body)
}
