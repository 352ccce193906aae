// A small in-memory Parley server for the SDK's unit tests: one direct conversation between
// alice (the client under test) and bob (driven by the test), alice's event log, idempotent
// sends keyed by client_msg_id, long-poll, and a fake WebSocket. It is not a conformance
// model: just enough of docs/protocol.md to exercise the client's merge, gap and retry logic,
// with switches to make the network misbehave.

export const CONV = 'd_ab';
export const GROUP = 'g_big';

export class FakeServer {
  constructor() {
    this.up = true; // false: every request and connection fails like a dead network
    this.wsBroken = false; // true: WebSocket upgrades fail while HTTP works
    this.wsDiesAfterOpen = false; // true: every WebSocket opens, then dies at once (1006)
    this.wsOpens = []; // Date.now() of every WebSocket the server accepted
    this.dropNextReply = false; // true: the next send is stored but its reply is lost
    this.deafToPings = false; // true: pings get no pong (a connection that died silently)
    this.retainedFrom = 1; // events below this cursor were pruned: older cursors get 410
    this.log = []; // alice's events, cursor = index + 1
    this.typing = []; // "conv_id state" of every typing frame alice sent
    this.presence = new Map(); // user_id -> {user_id, state, last_active_at?}; offline when absent
    this.presenceOps = []; // every presence_* frame alice sent, without its id
    this.hidden = false; // alice's PATCH /v1/me presence
    this.msgs = []; // the conversation, seq = index + 1
    this.byCmid = new Map(); // "sender client_msg_id" -> ack
    this.positions = { alice: { read: 0, delivered: 0 }, bob: { read: 0, delivered: 0 } };
    this.sockets = new Set();
    this.waiters = new Set();
    this.requests = []; // "METHOD path" of every HTTP request
    this.sends = []; // client_msg_id of every send request that reached the server
    this.snapshots = 0;
    // A read-fanout group (section 10) alice is in with 999 others: its messages are in no
    // log; sockets that opened it get them pushed, others a notice.
    this.group = { msgs: [], read: 0, members: 1000, noticeDelay: 1840, inSnapshot: false };
    this.mark = 0; // bumped by every group message
    this.historyAfter = []; // after_seq of every group history request
    this.historyFail = []; // statuses the next history requests answer (429 says Retry-After: 2)
    this.historyPage = 0; // caps a history page when > 0
    this.historyQueries = []; // query strings of the direct conversation's valid history requests
    this.msgSpacing = 1; // ms between the created_at of consecutive messages
    this.attachments = new Map(); // id -> attachment metadata, as uploads would leave it
    this.urlRequests = []; // {id, body} of every POST /v1/attachments/{id}/urls
    this.fetch = this.fetch.bind(this);
    const server = this;
    this.WebSocket = class extends FakeWebSocket {
      constructor(url) { super(url, server); }
    };
  }

  get cursor() { return this.log.length; }

  brief() {
    const last = this.msgs[this.msgs.length - 1] ?? null;
    const p = this.positions;
    return {
      conv_id: CONV, type: 'direct', name: '', owner_id: '', members_count: 2, fanout: 'write',
      max_seq: this.msgs.length, read_seq: p.alice.read, delivered_seq: p.alice.delivered, cleared_seq: 0,
      unread: Math.max(0, this.msgs.length - p.alice.read), last_message: last,
      peer_read_seq: p.bob.read, peer_delivered_seq: p.bob.delivered, updated_at: last?.created_at ?? 1,
    };
  }

  groupBrief() {
    const g = this.group;
    const last = g.msgs[g.msgs.length - 1] ?? null;
    return {
      conv_id: GROUP, type: 'group', name: 'Everyone', owner_id: 'bob', members_count: g.members, fanout: 'read',
      max_seq: g.msgs.length, read_seq: g.read, delivered_seq: g.read, cleared_seq: 0,
      unread: Math.max(0, g.msgs.length - g.read), last_message: last, updated_at: last?.created_at ?? 1,
    };
  }

  /** Bob posts in the group: pushed to sockets that opened it, a notice to the others. */
  groupSays(text, { push = true } = {}) {
    const g = this.group;
    const m = {
      conv_id: GROUP, seq: g.msgs.length + 1, msg_id: `gm_${g.msgs.length + 1}`, client_msg_id: `g-${g.msgs.length + 1}`,
      sender_id: 'bob', content_type: 1, content: { text }, extra: null, created_at: 1700000100000 + g.msgs.length, recalled: false,
    };
    g.msgs.push(m);
    this.mark++;
    if (!push) return m;
    for (const ws of this.sockets) {
      if (ws.opened.has(GROUP)) ws.push({ op: 'message', message: m });
      else ws.push({ op: 'notice', conv_id: GROUP, max_seq: g.msgs.length, unread: g.msgs.length - g.read, members_count: g.members, pull_delay_ms: g.noticeDelay });
    }
    for (const w of this.waiters) w();
    return m;
  }

  /** A user's presence as the server answers it. */
  presenceOf(id) {
    return this.presence.get(id) ?? { user_id: id, state: 'offline' };
  }

  /** Pushes a frame that is not an event (a typing push) to every open socket. */
  pushAll(frame) {
    for (const ws of this.sockets) ws.push(frame);
  }

  /** Appends an event to alice's log and pushes it to her connected sockets. */
  emit(type, data) {
    const ev = { cursor: this.log.length + 1, type, conv_id: CONV, ts: Date.now(), data };
    this.log.push(ev);
    for (const ws of this.sockets) ws.push({ op: 'event', event: ev });
    for (const w of this.waiters) w();
    return ev;
  }

  store(sender, req) {
    const key = `${sender} ${req.client_msg_id}`;
    const old = this.byCmid.get(key);
    if (old) return { ...old, duplicate: true };
    const m = {
      conv_id: CONV, seq: this.msgs.length + 1, msg_id: `m_${this.msgs.length + 1}`, client_msg_id: req.client_msg_id,
      sender_id: sender, content_type: req.content_type, content: this.withAttachment(req), extra: req.extra ?? null,
      created_at: this.createdAt(this.msgs.length + 1), recalled: false,
    };
    this.msgs.push(m);
    this.positions[sender].read = m.seq;
    this.positions[sender].delivered = m.seq;
    const ack = { code: 0, conv_id: CONV, client_msg_id: m.client_msg_id, msg_id: m.msg_id, seq: m.seq, created_at: m.created_at, duplicate: false };
    this.byCmid.set(key, ack);
    this.emit('message', m);
    return ack;
  }

  /** The created_at of message seq of the direct conversation. */
  createdAt(seq) { return 1700000000000 + (seq - 1) * this.msgSpacing; }

  /**
   * History of the direct conversation (section 6.3): after_seq, before_seq, around_ts and
   * limit, validated as the server does, with the same 400s.
   */
  history(u) {
    const bad = (error) => json(400, { code: 400, error: `invalid request: ${error}` });
    const p = {};
    for (const [k, lo] of [['after_seq', 0], ['before_seq', 1], ['around_ts', 1], ['limit', 0]]) {
      const v = u.searchParams.get(k);
      if (v === null || v === '') continue;
      if (!/^-?\d+$/.test(v)) return bad(`query parameter ${k} must be an integer`);
      if (Number(v) < lo) return bad(`query parameter ${k} must be at least ${lo}`);
      p[k] = Number(v);
    }
    const after = p.after_seq ?? 0;
    if (after > 0 && p.before_seq) return bad('give after_seq or before_seq, not both');
    if (p.around_ts && (after > 0 || p.before_seq)) return bad('around_ts goes without after_seq and before_seq');
    this.historyQueries.push(u.search);
    const limit = Math.min(p.limit || 50, 200);
    const all = this.msgs;
    const page = (msgs, more) => ({ messages: msgs.map((m) => ({ ...m })), has_more: more });
    if (p.around_ts) {
      const from = all.filter((m) => m.created_at >= p.around_ts);
      const older = all.filter((m) => m.created_at < p.around_ts);
      const nb = Math.min(older.length, Math.max(Math.floor(limit / 2), limit - from.length));
      const na = Math.min(from.length, limit - nb);
      const out = page([...older.slice(older.length - nb), ...from.slice(0, na)], older.length > nb || from.length > na);
      if (from.length) out.anchor_seq = from[0].seq;
      if (older.length > nb) out.has_more_before = true;
      if (from.length > na) out.has_more_after = true;
      return json(200, out);
    }
    if (p.before_seq) {
      const below = all.filter((m) => m.seq < p.before_seq);
      return json(200, page(below.slice(-limit), below.length > limit));
    }
    const above = all.filter((m) => m.seq > after);
    return json(200, page(above.slice(0, limit), above.length > limit));
  }

  /** The content to store: an attachment's gets the server's metadata, whatever the client put there. */
  withAttachment(req) {
    if (!(req.content_type >= 2 && req.content_type <= 5)) return req.content;
    const a = this.attachments.get(req.content?.attachment_id);
    return { ...req.content, attachment: a ? { ...a } : undefined };
  }

  /** Bob sends a message (alice's log gets the event). */
  bobSays(text, cmid = `bob-${this.msgs.length + 1}`) {
    return this.store('bob', { client_msg_id: cmid, content_type: 1, content: { text } });
  }

  bobReads(seq) {
    this.positions.bob.read = Math.max(this.positions.bob.read, seq);
    this.positions.bob.delivered = Math.max(this.positions.bob.delivered, seq);
    this.emit('read', { user_id: 'bob', read_seq: this.positions.bob.read });
  }

  position(kind, seq) {
    const p = this.positions.alice;
    const next = Math.max(p[kind], Math.min(seq, this.msgs.length));
    if (next > p[kind]) {
      p[kind] = next;
      if (kind === 'read') {
        p.delivered = Math.max(p.delivered, next);
        this.emit('read', { user_id: 'alice', read_seq: next });
      }
    }
    return { [`${kind}_seq`]: p[kind] };
  }

  syncFrom(cursor, limit = 100) {
    if (cursor > this.cursor) return { error: 409 };
    if (cursor + 1 < this.retainedFrom) return { error: 410 };
    const events = this.log.slice(cursor, cursor + limit);
    return { cursor: events.length ? events[events.length - 1].cursor : cursor, events, has_more: cursor + limit < this.log.length };
  }

  /** The read-fanout part of a sync answer: the mark, and the group's brief if it changed since mark. */
  changesSince(mark) {
    return { mark: this.mark, conversations: mark < this.mark ? [this.groupBrief()] : [] };
  }

  async fetch(url, init = {}) {
    const u = new URL(url);
    const method = init.method ?? 'GET';
    this.requests.push(`${method} ${u.pathname}`);
    if (!this.up) throw new TypeError('fetch failed');
    const body = init.body ? JSON.parse(init.body) : null;
    const q = (k) => Number(u.searchParams.get(k) ?? 0);
    const ok = (v) => json(200, v);
    const att = u.pathname.match(/^\/v1\/attachments\/([^/]+)(\/urls)?$/);
    if (att) {
      const a = this.attachments.get(decodeURIComponent(att[1]));
      if (!a) return json(404, { code: 404, error: 'no such attachment' });
      if (method === 'GET' && !att[2]) return ok(a);
      if (method === 'POST' && att[2]) {
        this.urlRequests.push({ id: a.id, body });
        const exp = Date.now() + (body?.expires_in ?? 3600) * 1000;
        const sig = `?exp=${exp}&sig=s${this.urlRequests.length}`;
        const out = { content: `/v1/attachments/${a.id}/content${sig}`, expires_at: exp };
        if (a.thumbnail) out.thumbnail = `/v1/attachments/${a.id}/thumbnail${sig}`;
        return ok(out);
      }
    }
    switch (`${method} ${u.pathname}`) {
      case 'GET /v1/sync/snapshot':
        // Two pages: the cursor alone, then the conversation (as a server with many would).
        if (!u.searchParams.get('after')) {
          this.snapshots++;
          return ok({ cursor: this.cursor, mark: this.mark, conversations: [], messages: {}, read_positions: {}, has_more: true, next: 'p2' });
        }
        return ok({
          cursor: this.cursor, mark: this.mark, conversations: this.group.inSnapshot ? [this.brief(), this.groupBrief()] : [this.brief()],
          messages: { [CONV]: q('recent') ? this.msgs.slice(-q('recent')) : [] },
          read_positions: { [CONV]: { alice: this.positions.alice.read, bob: this.positions.bob.read } },
          has_more: false, next: '',
        });
      case `GET /v1/conversations/${CONV}/members`: {
        const all = [
          { user_id: 'alice', name: 'Alice', joined_at: 1, role: 'member' },
          { user_id: 'bob', name: 'Bob', joined_at: 1, role: 'member' },
        ];
        const first = !u.searchParams.get('after');
        return ok({ members: first ? all.slice(0, 1) : all.slice(1), has_more: first, next: first ? 'm2' : '' });
      }
      case 'GET /v1/me':
        return ok({ user_id: 'alice', device_id: 'web', name: 'Alice', presence: this.hidden ? 'hidden' : 'visible' });
      case 'PATCH /v1/me':
        if (body.presence !== undefined) this.hidden = body.presence === 'hidden';
        return ok({ user_id: 'alice', device_id: 'web', name: 'Alice', presence: this.hidden ? 'hidden' : 'visible' });
      case 'GET /v1/presence':
        return ok({ presence: (u.searchParams.get('users') ?? '').split(',').map((id) => this.presenceOf(id)) });
      case 'GET /v1/sync': {
        let r = this.syncFrom(q('cursor'), q('limit') || 100);
        if (r.error) return json(r.error, { code: r.error, error: `sync error ${r.error}` });
        if (!r.events.length && q('wait') > 0 && q('mark') >= this.mark) {
          await new Promise((resolve) => {
            const done = () => { this.waiters.delete(done); clearTimeout(t); resolve(); };
            const t = setTimeout(done, 30); // a short "wait" keeps the tests fast
            this.waiters.add(done);
          });
          if (!this.up) throw new TypeError('fetch failed');
          r = this.syncFrom(q('cursor'), q('limit') || 100);
        }
        return ok({ ...r, ...this.changesSince(q('mark')) });
      }
      case 'POST /v1/messages':
        this.sends.push(body.client_msg_id);
        return ok(this.store('alice', body));
      case `POST /v1/conversations/${CONV}/read`:
        return ok(this.position('read', body.seq));
      case `POST /v1/conversations/${CONV}/delivered`:
        return ok(this.position('delivered', body.seq));
      case `GET /v1/conversations/${CONV}`:
        return ok(this.brief());
      case `GET /v1/conversations/${CONV}/messages`:
        return this.history(u);
      case `GET /v1/conversations/${GROUP}`:
        return ok(this.groupBrief());
      case `GET /v1/conversations/${GROUP}/messages`: {
        this.historyAfter.push(q('after_seq'));
        const fail = this.historyFail.shift();
        if (fail === 429) return new Response(JSON.stringify({ code: 429, error: 'rate limited' }), { status: 429, headers: { 'Retry-After': '2' } });
        if (fail) return json(fail, { code: fail, error: 'scripted' });
        const limit = Math.min(q('limit') || 50, this.historyPage || Infinity);
        const msgs = this.group.msgs.filter((m) => m.seq > q('after_seq')).slice(0, limit);
        return ok({ messages: msgs, has_more: msgs.length > 0 && msgs[msgs.length - 1].seq < this.group.msgs.length });
      }
      default:
        return json(404, { code: 404, error: `no such endpoint: ${method} ${u.pathname}` });
    }
  }

  /** Closes every socket as the server does on shutdown (1001). */
  dropSockets(code = 1001) {
    for (const ws of this.sockets) ws.serverClose(code);
  }
}

function json(status, v) {
  return new Response(JSON.stringify(v), { status, headers: { 'Content-Type': 'application/json' } });
}

/** The browser WebSocket API, served by a FakeServer. */
class FakeWebSocket {
  constructor(url, server) {
    this.url = url;
    this.server = server;
    this.readyState = 0;
    this.sent = [];
    this.opened = new Set(); // conversations opened on this socket
    setTimeout(() => this._connect(), 0);
  }

  _connect() {
    const s = this.server;
    if (!s.up || s.wsBroken) {
      this.readyState = 3;
      this.onerror?.({});
      this.onclose?.({ code: 1006 });
      return;
    }
    const u = new URL(this.url);
    this.readyState = 1;
    s.sockets.add(this);
    this.onopen?.({});
    s.wsOpens.push(Date.now());
    if (s.wsDiesAfterOpen) {
      // A frame arrives (a reply to the client's first frames, say), then the connection
      // dies, as a browser kills one on a frame it cannot decode.
      this.push({ id: 'earlier', code: 0, op: 'pong' });
      this.serverClose(1006);
      return;
    }
    if (u.searchParams.has('cursor')) {
      const r = s.syncFrom(Number(u.searchParams.get('cursor')), 1e9);
      if (r.error) {
        this.push({ op: 'error', code: r.error, error: `cursor error ${r.error}` });
        this.serverClose(1008);
        return;
      }
      for (const ev of r.events) this.push({ op: 'event', event: ev });
    }
    if (u.searchParams.has('mark')) this.push({ op: 'changes', ...s.changesSince(Number(u.searchParams.get('mark'))) });
  }

  push(frame) {
    if (this.readyState !== 1) return;
    const data = JSON.stringify(frame);
    // Frames sent before a close still arrive (close events are queued after them).
    setTimeout(() => { if (this.readyState !== 3) this.onmessage?.({ data }); }, 0);
  }

  send(data) {
    if (this.readyState !== 1) throw new Error('not open');
    const f = JSON.parse(data);
    this.sent.push(f);
    const s = this.server;
    switch (f.op) {
      case 'send': {
        s.sends.push(f.client_msg_id);
        const { id, op, ...req } = f;
        const ack = s.store('alice', req);
        if (s.dropNextReply) {
          s.dropNextReply = false;
          this.serverClose(1006); // stored, but the connection dies before the reply
          return;
        }
        this.push({ id, ...ack });
        return;
      }
      case 'ping':
        if (!s.deafToPings) this.push({ id: f.id, code: 0, op: 'pong' });
        return;
      case 'open':
        if (f.conv_id !== GROUP && f.conv_id !== CONV) return this.push({ id: f.id, code: 404, error: 'not found' });
        this.opened.add(f.conv_id);
        this.push({ id: f.id, code: 0, ...(f.conv_id === GROUP ? s.groupBrief() : s.brief()) });
        return;
      case 'typing':
        s.typing.push(`${f.conv_id} ${f.state}`);
        this.push({ id: f.id, code: 0, forwarded: true });
        return;
      case 'presence_subscribe': {
        const { id, ...op } = f;
        s.presenceOps.push(op);
        return this.push({ id, code: 0, presence: f.users.map((u) => s.presenceOf(u)) });
      }
      case 'presence_unsubscribe':
      case 'presence_set': {
        const { id, ...op } = f;
        s.presenceOps.push(op);
        return this.push({ id, code: 0 });
      }
      case 'close':
        this.opened.delete(f.conv_id);
        this.push({ id: f.id, code: 0 });
        return;
      case 'read':
      case 'delivered':
        this.push({ id: f.id, code: 0, ...s.position(f.op, f.seq) });
        return;
      default:
        this.push({ id: f.id, code: 400, error: `unknown op ${f.op}` });
    }
  }

  close(code = 1005) {
    if (this.readyState >= 2) return;
    this.readyState = 2;
    this.server.sockets.delete(this);
    setTimeout(() => { this.readyState = 3; this.onclose?.({ code }); }, 0);
  }

  serverClose(code) {
    this.close(code);
  }
}
