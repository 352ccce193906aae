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
// Send is the one call that retries by itself. It keeps a single client_msg_id for a message
// and re-sends it until the server acknowledges it (the server deduplicates on that id), so a
// message is stored once however many networks, timeouts and server restarts it crosses.
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
package client
