// Package client is the Go SDK for a Parley server (see docs/protocol.md for the wire contract).
//
// A Client has two halves:
//
//   - Request methods (CreateDirect, History, MarkRead, Sync, ...) map one to one onto the HTTP
//     API. They never retry: the caller sees each answer, and errors from the server are a
//     *Error carrying the wire code.
//   - A session (Run, or Connect in the background) keeps one WebSocket open and turns the
//     server's pushes into a stream of SyncEvents handed to Options.OnEvent exactly once each,
//     in cursor order, with no gaps: repeats are dropped, gaps are fetched over HTTP, drops are
//     followed by a reconnect that resumes from the last cursor delivered, and an expired
//     cursor is replaced by a fresh snapshot (Options.OnReset).
//
// Large groups (read fanout, docs/protocol.md section 10.2) need nothing more from the app:
// their messages are in no event log, so the session gets them from pushes when the
// conversation is open (OpenConversation, re-opened after every reconnect) and otherwise by
// history after a notice or a sync brief, waiting the server's pull delay first so that a
// large group's members do not all fetch at once. Either way each message reaches OnEvent
// once, in seq order per conversation, as a message event with Cursor 0 (it has none).
// OnConversation receives those conversations' briefs as notices and the user's reads change
// them (unread as the server counts it, the same on every device), and OnReceipts the read
// counts the server pushes for the user's own group messages. Persist Mark and Seqs with
// Cursor, and pass all three back in Options, to resume exactly.
//
// Typing indicators (section 9.10): call Keystroke on every keystroke in a conversation's
// composer; the SDK sends "started" at most once per 3 s, and "stopped" after 5 s without
// a keystroke, at StopTyping, or when Send sends into the conversation. OnTyping receives
// the pushes; a "started" holds for its ExpiresInMS unless a newer push replaces it.
//
// Presence (section 9.11): SubscribePresence follows up to 500 users (adding to the set, or
// replacing it) and UnsubscribePresence stops; OnPresence receives each answer and then every
// change, in the server's order, and the SDK subscribes again after every reconnect.
// SetAway says this device is away or back; GetPresence asks once over HTTP without
// following; SetPresenceHidden hides the user from everyone (a hidden user looks offline).
//
// Send is the one call that retries by itself. It keeps a single client_msg_id for a message
// and re-sends it until the server acknowledges it (the server deduplicates on that id), so a
// message is stored once however many networks, timeouts and server restarts it crosses.
//
// Attachments (section 14) go up before the message that carries them. Upload sends a file
// from an io.ReaderAt over tus 1.0 in chunks (UploadOptions.ChunkSize, 8 MiB by default),
// never holding it whole in memory, and after a dropped connection or a 5xx asks the
// server how much it holds and goes on from there; ResumeUpload continues an upload whose id
// the app saved (UploadOptions.OnCreated) before a restart. SendAttachment then sends
// content_type ContentImage, ContentFile, ContentAudio or ContentVideo with content
// {"attachment_id", "name", "caption"} (Send with an AttachmentContent is the same), and the
// server fills in content.attachment, which Message.Attachment reads. Download checks the
// bytes against the attachment's SHA-256; OpenAttachment streams them or the thumbnail,
// OpenAttachmentRange resumes a download from an offset, and AttachmentURLs signs URLs that
// need no token. A file over the server's size limit is a 413 *Error, one over the day's
// quota a 429 *Error with no RetryAfter.
//
// An Inbox is an optional in-memory merge of the messages a Client has seen, keyed by
// (conv_id, seq); apps with their own storage can ignore it.
//
// A short session:
//
//	c := client.New(client.Options{
//		BaseURL: "http://127.0.0.1:8080",
//		Token:   token,
//		OnEvent: func(ev client.SyncEvent) { log.Println(ev.Cursor, ev.Type, ev.ConvID) },
//	})
//	if err := c.Connect(ctx); err != nil {
//		return err
//	}
//	defer c.Close()
//	conv, err := c.CreateDirect(ctx, "bob")
//	if err != nil {
//		return err
//	}
//	ack, err := c.Send(ctx, conv.ConvID, client.ContentText, "hello", nil)
//
// The SDK, like the server, is licensed under the Apache License, Version 2.0 (the LICENSE
// file at the repository's root; SPDX identifier Apache-2.0).
package client
