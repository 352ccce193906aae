package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/parleychat/parley/internal/chat"
	"github.com/parleychat/parley/protocol"
)

// clientFunc handles one authenticated client call: it returns the status and the body to
// send, or an error for statusOf.
type clientFunc func(r *http.Request, body []byte, me chat.Identity) (int, any, error)

// sessionFunc is a clientFunc that needs the verified token itself, not only whose it is
// (a write that must not outlive the token's revocation).
type sessionFunc func(r *http.Request, body []byte, sess chat.Session) (int, any, error)

// adminFunc handles one operator call.
type adminFunc func(r *http.Request, body []byte) (int, any, error)

// empty is the body of a success with no result.
type empty struct{}

// client wraps a client route: authentication, the request limit, the body limit.
func (g *Gateway) client(h clientFunc) http.Handler { return g.clientRoute(identityOnly(h), false) }

// clientSend is client for the send route, which also takes from the send limit.
func (g *Gateway) clientSend(h clientFunc) http.Handler { return g.clientRoute(identityOnly(h), true) }

// clientSession is client for a route that is handed the session.
func (g *Gateway) clientSession(h sessionFunc) http.Handler { return g.clientRoute(h, false) }

// identityOnly adapts a clientFunc to the session it is not handed.
func identityOnly(h clientFunc) sessionFunc {
	return func(r *http.Request, body []byte, sess chat.Session) (int, any, error) {
		return h(r, body, sess.Identity)
	}
}

func (g *Gateway) clientRoute(h sessionFunc, send bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, err := g.authenticate(r, false)
		me := sess.Identity
		if err == nil {
			err = g.allow(me, send)
		}
		body, ok := g.admit(w, r, err)
		if !ok {
			return
		}
		var status int
		var out any
		err = g.weighed(r.Context(), me, r.Method != http.MethodGet, func(ctx context.Context) (err error) {
			status, out, err = h(r.WithContext(ctx), body, sess)
			return err
		})
		g.reply(w, r, status, out, err)
	})
}

// admin wraps an operator route: the admin secret, the body limit.
func (g *Gateway) admin(h adminFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := g.admit(w, r, g.checkAdmin(r))
		if !ok {
			return
		}
		status, out, err := h(r, body)
		g.reply(w, r, status, out, err)
	})
}

// admit reads the body of a request that passed its checks (checked is nil) and returns
// it. A request that failed them is refused before its body is read, so that an
// unauthenticated or rate-limited client cannot make the server wait for its body; one
// whose body cannot be read is refused too. ok is false when the request was answered.
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request, checked error) (body []byte, ok bool) {
	err := checked
	if err == nil {
		body, err = g.readBody(w, r)
	}
	if err != nil {
		g.refuse(w, r, err)
		return nil, false
	}
	return body, true
}

// refuse answers a request whose body was not read (or not wholly read) with err, then
// drops the connection when the request has a body: net/http would otherwise read the
// unread body after the handler returns, to reuse the connection, and a client that
// trickles it would hold the connection until the body deadline. "Connection: close" tells
// the client; the expired read deadline makes net/http give up on the body at once.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if r.ContentLength == 0 {
		g.writeError(w, r, err)
		return
	}
	w.Header().Set("Connection", "close")
	g.writeError(w, r, err)
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

func (g *Gateway) reply(w http.ResponseWriter, r *http.Request, status int, out any, err error) {
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	g.writeJSON(w, status, out)
}

// readBody reads the request body, at most MaxBodyBytes of it (413 past that), within the
// BodyTimeout deadline that ServeHTTP set (408 past that). Once the body is in, the
// deadline is lifted: net/http's background read, which notices a client that leaves a
// long-poll, would otherwise end the request when it passes.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	tooLarge := fmt.Errorf("%w: request body larger than %d bytes", chat.ErrTooLarge, g.cfg.MaxBodyBytes)
	if r.ContentLength > g.cfg.MaxBodyBytes {
		return nil, tooLarge
	}
	// A declared length sizes the buffer once: io.ReadAll's doubling copies a 1 MiB body
	// about 20 times (the length is at most MaxBodyBytes here, and a body longer than it
	// declares is refused by net/http).
	buf := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 0)+bytes.MinRead))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes))
	body := buf.Bytes()
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &statusError{http.StatusRequestTimeout,
			fmt.Sprintf("request body not received within %v", g.cfg.BodyTimeout)}
	case err != nil:
		return nil, invalidf("reading request body: %v", err)
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return body, nil
}

// startDeadlines sets the connection's deadlines for a new request. The BodyTimeout clock
// starts for a request that has a body (readBody lifts it); it bounds net/http's own
// reading of a body that no handler reads, too. The write deadline is cleared: one set for
// an earlier response on this keep-alive connection must not cut this one (a long-poll
// writes only after waiting longer than WriteTimeout), and the WebSocket upgrade sets its
// own. net/http (Go 1.26) also clears it after each response; this does not rely on that.
// Each response sets a fresh one just before it writes (writeTimely, timely).
func (g *Gateway) startDeadlines(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	if r.ContentLength != 0 {
		_ = rc.SetReadDeadline(time.Now().Add(g.cfg.BodyTimeout))
	}
}

// writeChunk is how much of a response is written under one write deadline: a client
// must take each 64 KiB of a response within WriteTimeout (at least 6.4 KiB/s by default).
// A history page may be 13 MB, so one deadline for the whole of it would cut every client
// slower than 1.3 MB/s, which would then retry the same page for ever.
const writeChunk = 64 << 10

// writeJSON sends v as a JSON body with status, under writeTimely's deadlines.
func (g *Gateway) writeJSON(w http.ResponseWriter, status int, v any) {
	var b []byte
	var err error
	if enc, ok := v.(encodedJSON); ok {
		b = enc
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		g.log.Error("gateway: encode response", "err", err)
		status = http.StatusInternalServerError
		b, _ = json.Marshal(protocol.ErrorBody{Code: status, Error: "internal error"})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	g.writeTimely(w, append(b, '\n'))
}

// writeTimely writes b in pieces of writeChunk, each under a write deadline of WriteTimeout
// set just before it. A client that does not take a piece in time is one that does not
// read: the write fails, net/http closes the connection, and the handler's goroutine and
// buffers are freed (counted as parley_http_responses_cut_total).
func (g *Gateway) writeTimely(w http.ResponseWriter, b []byte) {
	rc := http.NewResponseController(w)
	for len(b) > 0 {
		n := min(len(b), writeChunk)
		g.writeDeadline(rc)
		if _, err := w.Write(b[:n]); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				g.met.ResponseCut()
			}
			return
		}
		b = b[n:]
	}
}

// writeDeadline gives the response's next writes WriteTimeout from now.
func (g *Gateway) writeDeadline(rc *http.ResponseController) {
	_ = rc.SetWriteDeadline(time.Now().Add(g.cfg.WriteTimeout))
}

// timely wraps a handler that is not JSON but writes at once, and little (the web
// client's files, /metrics): its whole response is written under one WriteTimeout deadline.
func (g *Gateway) timely(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.writeDeadline(http.NewResponseController(w))
		h.ServeHTTP(w, r)
	})
}

// writeError sends {"code","error"} with the status statusOf gives err; 500s are logged.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := statusOf(err)
	switch code {
	case http.StatusInternalServerError:
		g.log.Error("gateway: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="parley"`)
	case http.StatusTooManyRequests:
		if ra := retryAfterOf(err); ra > 0 { // a quota has no retry time to promise
			w.Header().Set("Retry-After", strconv.Itoa(ra))
		}
	}
	g.writeJSON(w, code, protocol.ErrorBody{Code: code, Error: errorMessage(err, code)})
}

// pathConvID returns the {conv_id} of the path, 400 when malformed (before any lookup).
func pathConvID(r *http.Request) (string, error) {
	id := r.PathValue("conv_id")
	if !protocol.ValidConvID(id) {
		return "", invalidf("conv_id is malformed")
	}
	return id, nil
}

// ---- operator routes (section 3) ----

func (g *Gateway) createUser(r *http.Request, body []byte) (int, any, error) {
	req, err := decodeCreateUserRequest(body)
	if err != nil {
		return 0, nil, err
	}
	u, created, err := g.svc.CreateUser(r.Context(), req.UserID, req.Name)
	if err != nil {
		return 0, nil, err
	}
	if created {
		return http.StatusCreated, u, nil
	}
	return http.StatusOK, u, nil
}

func (g *Gateway) issueToken(r *http.Request, body []byte) (int, any, error) {
	req, err := decodeTokenRequest(body)
	if err != nil {
		return 0, nil, err
	}
	tok, err := g.svc.IssueToken(r.Context(), req.UserID, req.DeviceID, time.Duration(req.TTLSeconds)*time.Second)
	return http.StatusOK, tok, err
}

func (g *Gateway) revokeTokens(r *http.Request, _ []byte) (int, any, error) {
	userID := r.PathValue("user_id")
	if !protocol.ValidUserID(userID) {
		return 0, nil, invalidf("user_id is malformed")
	}
	return http.StatusOK, empty{}, g.svc.RevokeTokens(r.Context(), userID)
}

// ---- conversations (section 5) ----

func (g *Gateway) createConversation(r *http.Request, body []byte, me chat.Identity) (int, any, error) {
	req, err := decodeCreateConversationRequest(body)
	if err != nil {
		return 0, nil, err
	}
	var c protocol.ConversationBrief
	err = g.limitedChange(r.Context(), g.creations, me.UserID, "too many conversations created by this user", func() (err error) {
		c, err = g.svc.CreateConversation(r.Context(), me, req)
		return err
	})
	if statusOf(err) == http.StatusTooManyRequests && req.Type == protocol.TypeDirect {
		// Asking for a direct conversation that exists creates nothing: never refused.
		if b, ok, xerr := g.svc.ExistingDirect(r.Context(), me, req.PeerID); ok || xerr != nil {
			return http.StatusOK, b, xerr
		}
	}
	return http.StatusOK, c, err
}

// limitedChange runs change against lim's bucket for key: refused with 429 (what says
// why) while the bucket is empty. The token is given back when change created no events:
// it failed, or changed nothing (a rename to the current name, a direct conversation that
// already exists), so that only real changes count and a caller that is refused (a
// non-member, say) cannot spend a conversation's budget. ctx is from chat.WithEventCount.
func (g *Gateway) limitedChange(ctx context.Context, lim *limiter, key, what string, change func() error) error {
	ok, wait, refund := lim.take(key, time.Now())
	if !ok {
		return &rateLimitError{what: what, retryAfter: retrySeconds(wait)}
	}
	before := chat.EventsCounted(ctx)
	err := change()
	if chat.EventsCounted(ctx) == before {
		refund()
	}
	return err
}

// convChangeLimited is limitedChange for a change of conversation convID's metadata.
func (g *Gateway) convChangeLimited(ctx context.Context, convID string, change func() error) error {
	return g.limitedChange(ctx, g.convChanges, convID, "too many changes to this conversation", change)
}

func (g *Gateway) unreadTotal(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	total, err := g.svc.UnreadTotal(r.Context(), me)
	return http.StatusOK, total, err
}

func (g *Gateway) listConversations(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	q, err := pageQuery(r)
	if err != nil {
		return 0, nil, err
	}
	list, err := g.svc.ListConversations(r.Context(), me, q)
	return http.StatusOK, list, err
}

// pageQuery reads the paging parameters of the list calls: limit (0 or absent: the
// default) and after, the opaque "next" of the previous page.
func pageQuery(r *http.Request) (chat.PageQuery, error) {
	q := r.URL.Query()
	limit, err := queryInt(q, "limit", 0, 0)
	if err != nil {
		return chat.PageQuery{}, err
	}
	return chat.PageQuery{After: q.Get("after"), Limit: int(min(limit, protocol.MaxListLimit))}, nil
}

func (g *Gateway) getConversation(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	convID, err := pathConvID(r)
	if err != nil {
		return 0, nil, err
	}
	c, err := g.svc.GetConversation(r.Context(), me, convID)
	return http.StatusOK, c, err
}

func (g *Gateway) renameConversation(r *http.Request, body []byte, me chat.Identity) (int, any, error) {
	convID, err := pathConvID(r)
	if err != nil {
		return 0, nil, err
	}
	req, err := decodeRenameRequest(body)
	if err != nil {
		return 0, nil, err
	}
	var c protocol.ConversationBrief
	ch := chat.GroupChange{Name: req.Name}
	if req.RetentionSeconds != nil {
		d := time.Duration(*req.RetentionSeconds) * time.Second
		ch.Retention = &d
	}
	err = g.convChangeLimited(r.Context(), convID, func() (err error) {
		c, err = g.svc.ChangeGroup(r.Context(), me, convID, ch)
		return err
	})
	return http.StatusOK, c, err
}

func (g *Gateway) deleteConversation(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	convID, err := pathConvID(r)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, empty{}, g.svc.DeleteConversation(r.Context(), me, convID)
}

func (g *Gateway) updateMembers(r *http.Request, body []byte, me chat.Identity) (int, any, error) {
	convID, err := pathConvID(r)
	if err != nil {
		return 0, nil, err
	}
	req, err := decodeMembersRequest(body)
	if err != nil {
		return 0, nil, err
	}
	var c protocol.ConversationBrief
	update := func() (err error) {
		c, err = g.svc.UpdateMembers(r.Context(), me, convID, req)
		return err
	}
	if leaving(req, me.UserID) {
		err = update() // a member may always leave
	} else {
		err = g.convChangeLimited(r.Context(), convID, update)
	}
	return http.StatusOK, c, err
}

func (g *Gateway) listMembers(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	convID, err := pathConvID(r)
	if err != nil {
		return 0, nil, err
	}
	q, err := pageQuery(r)
	if err != nil {
		return 0, nil, err
	}
	page, err := g.svc.ListMembers(r.Context(), me, convID, q)
	return http.StatusOK, page, err
}

// ---- who is who (section 3.3) ----

func (g *Gateway) me(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	out, err := g.svc.Me(r.Context(), me)
	return http.StatusOK, out, err
}

func (g *Gateway) user(r *http.Request, _ []byte, _ chat.Identity) (int, any, error) {
	out, err := g.svc.User(r.Context(), r.PathValue("user_id"))
	return http.StatusOK, out, err
}

// leaving reports whether req only removes the caller: leaving a group, which its change
// limit never refuses.
func leaving(req protocol.MembersRequest, userID string) bool {
	return len(req.Add) == 0 && len(req.Remove) > 0 && !slices.ContainsFunc(req.Remove, func(u string) bool { return u != userID })
}

// ---- messages (section 6) ----

func (g *Gateway) send(r *http.Request, body []byte, me chat.Identity) (int, any, error) {
	req, err := decodeSendRequest(body)
	if err != nil {
		return 0, nil, err
	}
	ack, err := g.svc.Send(r.Context(), me, req)
	ack.Code = 0
	return http.StatusOK, ack, err
}

func (g *Gateway) history(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	convID, err := pathConvID(r)
	if err != nil {
		return 0, nil, err
	}
	q, err := historyQuery(r)
	if err != nil {
		return 0, nil, err
	}
	if ok, wait := g.historyLim.allow(me.UserID, time.Now()); !ok {
		return 0, nil, &rateLimitError{what: "too many history pages read by this user", retryAfter: retrySeconds(wait)}
	}
	page, err := g.svc.History(r.Context(), me, convID, q)
	if page.Messages == nil {
		page.Messages = []protocol.Message{}
	}
	return http.StatusOK, page, err
}

// historyQuery reads after_seq, before_seq, around_ts and limit. before_seq and around_ts,
// when given, must be at least 1 (0 would select nothing, and chat reads 0 as "not
// given"); chat refuses around_ts with either of the others.
func historyQuery(r *http.Request) (chat.HistoryQuery, error) {
	q := r.URL.Query()
	after, err := queryInt(q, "after_seq", 0, 0)
	if err != nil {
		return chat.HistoryQuery{}, err
	}
	before, err := queryInt(q, "before_seq", 0, 1)
	if err != nil {
		return chat.HistoryQuery{}, err
	}
	around, err := queryInt(q, "around_ts", 0, 1)
	if err != nil {
		return chat.HistoryQuery{}, err
	}
	limit, err := queryInt(q, "limit", 0, 0)
	if err != nil {
		return chat.HistoryQuery{}, err
	}
	return chat.HistoryQuery{AfterSeq: after, BeforeSeq: before, AroundTS: around, Limit: int(min(limit, protocol.MaxPageLimit))}, nil
}

func (g *Gateway) recall(r *http.Request, body []byte, me chat.Identity) (int, any, error) {
	req, err := decodeRecallRequest(body)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, empty{}, g.svc.Recall(r.Context(), me, req.ConvID, *req.Seq)
}

// ---- read and delivered positions, receipts (section 7) ----

// positionBody decodes a read or delivered body; a conv_id in it must match the path.
func positionBody(r *http.Request, body []byte) (string, int64, error) {
	convID, err := pathConvID(r)
	if err != nil {
		return "", 0, err
	}
	req, err := decodePositionRequest(body, false)
	if err != nil {
		return "", 0, err
	}
	if req.ConvID != "" && req.ConvID != convID {
		return "", 0, invalidf("conv_id in the body does not match the path")
	}
	return convID, *req.Seq, nil
}

func (g *Gateway) markRead(r *http.Request, body []byte, me chat.Identity) (int, any, error) {
	convID, seq, err := positionBody(r, body)
	if err != nil {
		return 0, nil, err
	}
	n, err := g.svc.MarkRead(r.Context(), me, convID, seq)
	return http.StatusOK, protocol.ReadPosition{ReadSeq: n}, err
}

func (g *Gateway) markDelivered(r *http.Request, body []byte, me chat.Identity) (int, any, error) {
	convID, seq, err := positionBody(r, body)
	if err != nil {
		return 0, nil, err
	}
	n, err := g.svc.MarkDelivered(r.Context(), me, convID, seq)
	return http.StatusOK, protocol.DeliveredPosition{DeliveredSeq: n}, err
}

func (g *Gateway) receipts(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	convID, err := pathConvID(r)
	if err != nil {
		return 0, nil, err
	}
	seq, err := requiredQueryInt(r.URL.Query(), "seq", -1<<63)
	if err != nil {
		return 0, nil, err
	}
	if seq < 1 { // docs/protocol.md 7.2: N below 1 is 404, like N above max_seq
		return 0, nil, fmt.Errorf("%w: no message with seq %d", chat.ErrNotFound, seq)
	}
	rc, err := g.svc.Receipts(r.Context(), me, convID, seq)
	return http.StatusOK, rc, err
}

// ---- sync (section 8) ----

func (g *Gateway) snapshot(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	recent, err := queryInt(r.URL.Query(), "recent", -1, 0) // -1: chat's default
	if err != nil {
		return 0, nil, err
	}
	q, err := pageQuery(r)
	if err != nil {
		return 0, nil, err
	}
	snap, err := g.svc.Snapshot(r.Context(), me, int(min(recent, protocol.MaxRecent)), q)
	return http.StatusOK, snap, err
}

// sync answers GET /v1/sync. A waiting long-poll ends early, with no events, when the client
// goes away, the gateway drains, or a newer long-poll of the same device starts (see
// longPolls; past the per-user cap it gets 429).
func (g *Gateway) sync(r *http.Request, _ []byte, me chat.Identity) (int, any, error) {
	q := r.URL.Query()
	cursor, err := requiredQueryInt(q, "cursor", 0)
	if err != nil {
		return 0, nil, err
	}
	limit, err := queryInt(q, "limit", 0, 0)
	if err != nil {
		return 0, nil, err
	}
	wait, err := queryInt(q, "wait", 0, 0)
	if err != nil {
		return 0, nil, err
	}
	mark, err := queryInt(q, "mark", 0, 0)
	if err != nil {
		return 0, nil, err
	}
	g.presence.Took(me.UserID, me.DeviceID, cursor) // the device has what it syncs after
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(g.drainCtx, cancel)
	defer stop()
	if wait > 0 {
		release, err := g.polls.begin(me, cancel)
		if err != nil {
			return 0, nil, err
		}
		defer release()
		g.met.LongPollStarted()
		defer g.met.LongPollEnded()
		g.presence.Open(me.UserID, me.DeviceID) // a waiting long-poll takes events live
		defer g.presence.Close(me.UserID, me.DeviceID)
		if g.tracker != nil {
			g.tracker.Connected(me.UserID, me.DeviceID)
			defer g.tracker.Disconnected(me.UserID, me.DeviceID)
		}
	}
	resp, err := g.svc.Sync(ctx, me, cursor, mark, int(min(limit, protocol.MaxSyncLimit)),
		time.Duration(min(wait, protocol.MaxLongPollSecond))*time.Second)
	if err != nil {
		return 0, nil, err
	}
	g.presence.Took(me.UserID, me.DeviceID, resp.Cursor)
	return http.StatusOK, encodedJSON(appendSyncResponse(nil, &resp)), nil
}
