// SPDX-License-Identifier: Apache-2.0
// Parley reference JavaScript SDK.
//
// Import this module (it re-exports ./state.js); there are no other dependencies. It runs in
// a browser as is (the web client imports it) and in Node 20+ when given a WebSocket
// constructor (or transport "longpoll") and a storage. The wire contract is docs/protocol.md;
// this follows its section 8.5 ("a client's sync loop"):
//
//   - ChatState (in state.js) is the pure, synchronous model: conversations, messages merged
//     by (conv_id, seq), read positions applied with max, the outbox of unacknowledged sends
//     and the user's sync cursor. It does no I/O, so it is unit-tested on its own.
//   - ParleyClient does the I/O: a snapshot for a new device, then a WebSocket opened with
//     ?cursor= (or an HTTP long-poll loop when WebSocket is unavailable or forced), reconnects
//     with exponential backoff and jitter, long-polls for a while when sockets keep dying
//     soon after they open, re-sends every unacknowledged message with its
//     original client_msg_id, and keeps the cursor, together with the state it describes, in
//     localStorage (or any storage given to it).
//
// The state and its cursor are saved as one value, so a saved cursor never runs ahead of the
// saved state: after a reload the client resumes from the cursor and replays are harmless.

import { ChatState, ContentType, attachmentContentType, backoffDelay, sendOutcome } from './state.js';

export * from './state.js';

/** Bytes per tus PATCH: large enough to be fast, small enough that a retry resends little. */
const UPLOAD_CHUNK = 8 << 20;

/** Waits between tus retries of a failed request (ms): then the upload fails. */
const UPLOAD_RETRY_DELAYS = [0, 1000, 3000, 5000, 10000];

/** Signed URLs are fetched again when they have less than this left (ms). */
const URL_MARGIN = 5 * 60 * 1000;

/** The page size the SDK asks of paged calls: the largest the server gives (protocol 5.4). */
const MAX_LIST_LIMIT = 500;

/** Presence (section 9.11): how many users one connection follows. */
export const MAX_PRESENCE_SUBSCRIPTIONS = 500;

/** Typing (section 9.10): one "started" per 3 s while typing, "stopped" 5 s after the last keystroke. */
const TYPING_EVERY_MS = 3000;
const TYPING_IDLE_MS = 5000;

function abortError() {
  const e = new ParleyError(0, 'aborted');
  e.name = 'AbortError';
  return e;
}

/** An error from the server ({code, error}) or from the network (code 0). */
export class ParleyError extends Error {
  constructor(code, message, retryAfter = 0) {
    super(message);
    this.name = 'ParleyError';
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

// ---------------------------------------------------------------------------------------------
// Storage.

/** Saves state in localStorage (the browser default). */
export function localStorageAdapter(ls = globalThis.localStorage) {
  return {
    async load(key) {
      const s = ls.getItem(key);
      return s ? JSON.parse(s) : null;
    },
    async save(key, value) {
      ls.setItem(key, JSON.stringify(value));
    },
    async remove(key) {
      ls.removeItem(key);
    },
  };
}

/** Keeps state in memory only (Node, tests, private windows without storage). */
export function memoryStorage() {
  const m = new Map();
  return {
    async load(key) { return m.has(key) ? JSON.parse(m.get(key)) : null; },
    async save(key, value) { m.set(key, JSON.stringify(value)); },
    async remove(key) { m.delete(key); },
  };
}

function defaultStorage() {
  try {
    if (globalThis.localStorage) {
      const k = '__parley_probe__';
      globalThis.localStorage.setItem(k, '1');
      globalThis.localStorage.removeItem(k);
      return localStorageAdapter();
    }
  } catch { /* storage disabled */ }
  return memoryStorage();
}

// ---------------------------------------------------------------------------------------------
// ParleyClient: the I/O.

/**
 * A connected client for one user's device.
 *
 * Events (EventTarget): "change" (detail.convs: Set of changed conv_ids), "status"
 * (detail: {status, transport}; status is "connecting", "online" or "offline"), "autherror"
 * (the token was refused: the client stopped), "replaced" (another connection of the same
 * device took over: the client stopped), "retry" (detail: {attempt, delay}: the client waits
 * delay ms before connecting again), "typing" (detail.convId: typing(convId) changed),
 * "presence" (detail.users: the user_ids whose presence() changed).
 *
 * A WebSocket that closes within stableAfter ms of opening counts as a failure, like one
 * that never opens: the backoff keeps growing instead of restarting, so a server (or a
 * message) that kills every socket at once cannot make the client reconnect in a tight loop.
 * After fallbackAfter consecutive failures, "auto" long-polls for longPollFor ms (the events
 * still arrive) and then tries the socket again.
 */
export class ParleyClient extends EventTarget {
  /**
   * @param {object} o
   * @param {string} o.token        the device token (section 3)
   * @param {string} [o.userId]     the user the token belongs to (tokens are opaque)
   * @param {string} [o.baseURL]    default: the page's origin
   * @param {"auto"|"websocket"|"longpoll"} [o.transport] "auto" uses WebSocket when it works
   * @param {object} [o.storage]    {load, save, remove} (async); default localStorage
   * @param {string} [o.storageKey] default "parley:<userId>"
   * @param {object} [o.backoff]    {base, max} in ms (default 250, 10000)
   * @param {number} [o.stableAfter]   ms a socket must stay open to count as working (10000)
   * @param {number} [o.fallbackAfter] consecutive socket failures before long-poll (3)
   * @param {number} [o.longPollFor]   ms to long-poll before trying the socket again (60000)
   */
  constructor(o) {
    super();
    this.token = o.token;
    this.userId = o.userId ?? '';
    this.baseURL = (o.baseURL ?? globalThis.location?.origin ?? '').replace(/\/+$/, '');
    this.transport = o.transport ?? 'auto';
    this.storage = o.storage ?? defaultStorage();
    this.storageKey = o.storageKey ?? `parley:${this.userId}`;
    this.WebSocketImpl = o.WebSocket ?? globalThis.WebSocket;
    this.fetchImpl = o.fetch ?? ((...a) => globalThis.fetch(...a));
    this.backoff = { base: 250, max: 10000, ...(o.backoff ?? {}) };
    this.stableAfter = o.stableAfter ?? 10000;
    this.fallbackAfter = o.fallbackAfter ?? 3;
    this.longPollFor = o.longPollFor ?? 60000;
    this.recent = o.recent ?? 30;
    this.pollWait = o.pollWait ?? 25;
    this.requestTimeout = o.requestTimeout ?? 15000;
    // A browser never shows the server's WebSocket pings to the page, so a connection that
    // died silently (no close) is found by pinging: a ping with no reply within
    // requestTimeout closes the socket and the client reconnects.
    this.heartbeat = o.heartbeat ?? 25000;
    this.saveDelay = o.saveDelay ?? 150;
    this.state = new ChatState(this.userId);
    this.status = 'offline';
    this.mode = '';
    this.stats = { snapshots: 0, connects: 0, resent: 0, gaps: 0, fallbacks: 0 };
    this._stopped = true;
    this._ws = null;
    this._inflight = new Map(); // frame id -> {resolve, reject, timer}
    this._frameSeq = 0;
    this._attempt = 0;
    this._wsFailures = 0;
    // Long-poll until this time (ms since the epoch): always with transport "longpoll", for
    // longPollFor after WebSocket kept failing with "auto".
    this._longPollUntil = this.transport === 'longpoll' ? Infinity : 0;
    this._sending = new Set(); // client_msg_ids in flight
    this._positions = { read: new Map(), delivered: new Map() }; // conv_id -> seq to send
    this._positionBusy = new Set(); // "kind conv_id" of positions in flight
    this._receipts = new Map(); // conv_id -> Map(seq -> receipts)
    // Typing (section 9.10): what this device sent (conv_id -> {sent, idle}), and who types
    // elsewhere (conv_id -> {users: Map(user_id -> expires at, ms), count, expiry timer}).
    this._typingOut = new Map();
    this._typingIn = new Map();
    // Presence (section 9.11): the users the app follows and this device's away, told again
    // on every new socket, and the latest state of each (user_id -> {state, last_active_at?}).
    this._presenceUsers = new Set();
    this._away = false;
    this._presence = new Map();
    this._wake = null;
    this._saveTimer = null;
    this._membersTimer = null;
    this._membersWanted = new Set(); // conv_ids whose members to fetch when the timer fires
    this._retryTimer = null;
    this._emitScheduled = false;
    this._pendingChanged = new Set();
    // Read fanout (section 10): conversations open on the socket, and pulls waiting for
    // their delay. Timers are injectable so tests can run the clock by hand.
    this.pullDelayMax = o.pullDelayMax ?? 3000;
    this._timers = o.timers ?? { set: (f, ms) => setTimeout(f, ms), clear: (t) => clearTimeout(t) };
    this._open = new Set(); // conv_ids the app has open
    this._pulls = new Map(); // conv_id -> timer of a scheduled pull
    this._pulling = new Set(); // conv_ids whose pull runs now
    this._pullFailures = new Map(); // conv_id -> pulls failed in a row
    // Attachments: the tus client (tus-js-client's browser bundle sets globalThis.tus), and
    // signed URLs by attachment id ({promise, expiresAt}), reused until near their expiry.
    this.tus = o.tus ?? null;
    this._urls = new Map();
  }

  // ---- lifecycle ----

  /** Loads the saved state and starts syncing. Resolves once the saved state is loaded. */
  async start() {
    if (!this._stopped) return;
    this._stopped = false;
    try {
      const saved = await this.storage.load(this.storageKey);
      if (saved) this.state = ChatState.fromJSON(saved, this.userId);
    } catch { /* unreadable saved state: start fresh */ }
    this._touch(new Set(this.state.convs.keys()));
    // Messages announced before the last save and not fetched yet are fetched now.
    for (const id of this.state.pendingPulls()) this._schedulePull(id, 'jitter');
    this._onlineHandler = () => this._wakeUp();
    globalThis.addEventListener?.('online', this._onlineHandler);
    this._loop();
  }

  /** Stops syncing and saves the state. */
  async stop() {
    this._stopped = true;
    globalThis.removeEventListener?.('online', this._onlineHandler);
    this._closeSocket();
    this._pollAbort?.abort();
    this._wakeUp();
    clearTimeout(this._retryTimer);
    clearTimeout(this._membersTimer);
    for (const t of this._pulls.values()) this._timers.clear(t);
    this._pulls.clear();
    await this.saveNow();
    this._setStatus('offline');
  }

  /** Stops and forgets this device's saved state (sign-out). */
  async forget() {
    await this.stop();
    clearTimeout(this._saveTimer);
    await this.storage.remove(this.storageKey);
  }

  // ---- reading ----

  conversations() { return this.state.conversations(); }
  conversation(convId) { return this.state.conversation(convId); }
  messages(convId) { return this.state.messages(convId); }
  unread(convId) { return this.state.unread(convId); }
  peerOf(convId) { return this.state.peerOf(convId); }
  members(convId) { return this.state.members(convId); }
  memberList(convId) { return this.state.memberList(convId); }
  msgState(msg) { return this.state.msgState(msg); }
  hasOlder(convId) { return this.state.hasOlder(convId); }
  /** True while loaded messages stop short of the newest ones (after messagesAround): loadNewer fills the hole. */
  hasNewer(convId) { return this.state.firstGap(convId) !== null; }
  /** That hole, [from, to] in seqs, or null: the page shows the messages below `from`. */
  firstGap(convId) { return this.state.firstGap(convId); }
  /**
   * Cached receipts of (convId, seq), or null: pushed by the server for the user's own
   * messages in groups as they change (section 9.5), or fetched by refreshReceipts.
   */
  receipts(convId, seq) { return this._receipts.get(convId)?.get(seq) ?? null; }

  // ---- typing (section 9.10) ----

  /**
   * Who else is typing in convId now: {users, count}, users the ids the server named (at
   * most 5 in a large group; this user left out), count how many type in all (more than
   * users.length: "several people are typing"). Empty once their 6 s passed without a push.
   */
  typing(convId) {
    const t = this._typingIn.get(convId);
    const now = Date.now();
    const users = t ? [...t.users].filter(([u, at]) => u !== this.userId && at > now).map(([u]) => u) : [];
    const self = t?.users.has(this.userId) ? 1 : 0;
    const count = users.length === 0 ? 0 : Math.max(users.length, (t.count ?? users.length) - self);
    return { users, count };
  }

  /**
   * Call on every keystroke in convId's composer: sends "started" at most once per 3 s
   * (the server drops more), and "stopped" 5 s after the last keystroke, or when a message
   * is sent to convId. Best effort, and only over the WebSocket: typing is not worth an
   * HTTP request.
   */
  keystroke(convId) {
    const now = Date.now();
    let t = this._typingOut.get(convId);
    if (!t) this._typingOut.set(convId, (t = { sent: 0, idle: null }));
    if (t.idle) this._timers.clear(t.idle);
    t.idle = this._timers.set(() => this.stopTyping(convId), TYPING_IDLE_MS);
    if (now - t.sent >= TYPING_EVERY_MS) {
      t.sent = now;
      this._sendTyping(convId, 'started');
    }
  }

  /** Sends "stopped" for convId if a keystroke sent "started" that is not stopped yet. */
  stopTyping(convId) {
    const t = this._typingOut.get(convId);
    if (!t) return;
    this._typingOut.delete(convId);
    if (t.idle) this._timers.clear(t.idle);
    this._sendTyping(convId, 'stopped');
  }

  _sendTyping(convId, state) {
    // Frames on one socket are answered in order, so a "stopped" never overtakes its "started".
    if (this._ws && this._ws.readyState === 1) this._wsCall('typing', { conv_id: convId, state }).catch(() => {});
  }

  /** Applies a typing push: one member's change, or (read fanout) the whole set. */
  _onTyping(f) {
    if (typeof f.conv_id !== 'string' || typeof f.user_id !== 'string') return;
    let t = this._typingIn.get(f.conv_id);
    if (!t) this._typingIn.set(f.conv_id, (t = { users: new Map(), count: 0, timer: null }));
    const until = Date.now() + Math.max(0, Math.min(Number(f.expires_in_ms) || 0, 6000));
    if (Array.isArray(f.typers)) { // a read-fanout set replaces what was shown
      t.users = new Map(f.typers.filter((u) => typeof u === 'string').map((u) => [u, until]));
      t.count = Number(f.count) || t.users.size;
    } else {
      if (f.state === 'started') t.users.set(f.user_id, until);
      else t.users.delete(f.user_id);
      t.count = t.users.size;
    }
    // Hidden by the client once its time passes (the server sends nothing more in write fanout).
    if (t.timer) this._timers.clear(t.timer);
    const next = Math.min(...[...t.users.values()]);
    t.timer = Number.isFinite(next) ? this._timers.set(() => { t.timer = null; this._expireTyping(f.conv_id); }, next - Date.now()) : null;
    this._touch(new Set([f.conv_id]));
    this.dispatchEvent(new CustomEventish('typing', { convId: f.conv_id }));
  }

  _expireTyping(convId) {
    const t = this._typingIn.get(convId);
    if (!t) return;
    const now = Date.now();
    for (const [u, at] of t.users) if (at <= now) t.users.delete(u);
    t.count = Math.min(t.count, t.users.size === 0 ? 0 : t.count);
    if (t.users.size === 0) this._typingIn.delete(convId);
    else {
      const next = Math.min(...t.users.values());
      t.timer = this._timers.set(() => { t.timer = null; this._expireTyping(convId); }, next - now);
    }
    this._touch(new Set([convId]));
    this.dispatchEvent(new CustomEventish('typing', { convId }));
  }

  // ---- presence (section 9.11) ----

  /**
   * The latest presence of a user followed with subscribePresence: {state, last_active_at?},
   * state "online", "away" or "offline" (last_active_at, RFC 3339 to the minute, only for
   * away and offline, when known), or null before the first answer. A user one may not see,
   * or who hides their presence, is "offline" with no last_active_at.
   */
  presence(userId) { return this._presence.get(userId) ?? null; }

  /**
   * Follows the presence of users (at most 500 in all, else a 400 ParleyError and nothing
   * changes), adding them to the set, or with replace in its place. Resolves with the
   * answer's entries; every answer and change is also applied to presence() and announced
   * by a "presence" event (detail.users: the user_ids that changed). The client subscribes
   * again after every reconnect. Presence needs the WebSocket: offline (or long-polling),
   * the wish is only recorded and this resolves with [].
   */
  async subscribePresence(users, { replace = false } = {}) {
    const next = new Set(replace ? users : [...this._presenceUsers, ...users]);
    if (next.size > MAX_PRESENCE_SUBSCRIPTIONS) {
      throw new ParleyError(400, `presence: at most ${MAX_PRESENCE_SUBSCRIPTIONS} users are followed`);
    }
    const ws = this._ws?.readyState === 1;
    const r = ws ? await this._wsCall('presence_subscribe', { users, ...(replace ? { replace: true } : {}) }) : null;
    this._presenceUsers = next;
    for (const u of [...this._presence.keys()]) if (!next.has(u)) this._presence.delete(u);
    if (!r) return [];
    this._applyPresence(r.presence);
    return r.presence ?? [];
  }

  /** Stops following users: their presence() is null again. */
  async unsubscribePresence(users) {
    for (const u of users) {
      this._presenceUsers.delete(u);
      this._presence.delete(u);
    }
    if (this._ws?.readyState === 1) await this._wsCall('presence_unsubscribe', { users }).catch(() => {});
  }

  /**
   * Says whether this device is away (its window hidden, its user idle): the user shows
   * away once every connected device is. Told again after every reconnect.
   */
  async setAway(away) {
    this._away = !!away;
    if (this._ws?.readyState === 1) await this._wsCall('presence_set', { state: away ? 'away' : 'active' });
  }

  /** The presence of users now, over HTTP (GET /v1/presence, at most 500), without following them. */
  async getPresence(users) {
    const r = await this._http('GET', `/v1/presence?users=${users.map(encodeURIComponent).join(',')}`);
    return r.presence ?? [];
  }

  /**
   * Hides the user's presence from everyone, on every device (hidden true), or shows it
   * again: PATCH /v1/me. A hidden user looks offline to others. Resolves with /v1/me's answer.
   */
  setPresenceHidden(hidden) {
    return this._http('PATCH', '/v1/me', { presence: hidden ? 'hidden' : 'visible' });
  }

  /** Applies presence entries (an answer or a push) to presence() and announces them. */
  _applyPresence(list) {
    const users = [];
    for (const p of Array.isArray(list) ? list : []) {
      if (typeof p?.user_id !== 'string' || !this._presenceUsers.has(p.user_id)) continue;
      const e = { state: p.state };
      if (p.last_active_at) e.last_active_at = p.last_active_at;
      this._presence.set(p.user_id, e);
      users.push(p.user_id);
    }
    if (users.length) this.dispatchEvent(new CustomEventish('presence', { users }));
  }

  /** Tells a new socket what the app follows and whether this device is away. */
  _restorePresence() {
    if (this._presenceUsers.size) {
      this._wsCall('presence_subscribe', { users: [...this._presenceUsers], replace: true })
        .then((r) => this._applyPresence(r.presence), () => {});
    }
    if (this._away) this._wsCall('presence_set', { state: 'away' }).catch(() => {});
  }

  // ---- actions ----

  /** Opens (or finds) the direct conversation with peerId. */
  async createDirect(peerId) {
    const b = await this._http('POST', '/v1/conversations', { type: 'direct', peer_id: peerId });
    this.state.upsertConversation(b, { peerId });
    this._afterChange();
    return this.state.conversation(b.conv_id);
  }

  /** Creates a group; the caller is its owner. */
  async createGroup(name, members, { readDetail = false } = {}) {
    const b = await this._http('POST', '/v1/conversations', { type: 'group', name, members, read_detail: readDetail });
    this.state.upsertConversation(b);
    this.state.applyReadPositions({ [b.conv_id]: Object.fromEntries([this.userId, ...members].filter(Boolean).map((u) => [u, 0])) });
    this._afterChange();
    return this.state.conversation(b.conv_id);
  }

  /**
   * Sends a message: it is queued (and saved) at once, shown as "sending", and sent now or on
   * the next connection, with the same client_msg_id however often it has to be re-sent.
   * Returns the client_msg_id.
   */
  send(convId, content, { contentType = ContentType.TEXT, extra = null } = {}) {
    this.stopTyping(convId); // sending ends typing
    if (typeof content === 'string') content = { text: content };
    const p = this.state.enqueue(convId, contentType, content, extra);
    this._afterChange();
    this.saveNow();
    this._flushOutbox();
    return p.client_msg_id;
  }

  // ---- attachments (section 14) ----

  /**
   * Uploads a file (a File or Blob) with tus 1.0 to /v1/uploads and resolves with its
   * attachment ({id, complete, mime_type, size, width, height, preview, ...}) once the server
   * has it. Uses tus-js-client (globalThis.tus, or o.tus): resumable, in chunks, retried;
   * an interrupted upload of the same file by the same user resumes where it stopped.
   * onProgress(sent, total) reports bytes; aborting signal stops it (rejects with code 0,
   * name "AbortError").
   */
  async upload(file, { onProgress, signal } = {}) {
    const tus = this.tus ?? globalThis.tus;
    if (!tus?.Upload) throw new ParleyError(0, 'upload: tus-js-client is not loaded (/static/vendor/tus.min.js)');
    if (signal?.aborted) throw abortError();
    const userId = this.userId;
    const id = await new Promise((resolve, reject) => {
      let done = false;
      const up = new tus.Upload(file, {
        endpoint: `${this.baseURL}/v1/uploads`,
        headers: { Authorization: `Bearer ${this.token}` },
        chunkSize: UPLOAD_CHUNK,
        retryDelays: UPLOAD_RETRY_DELAYS,
        removeFingerprintOnSuccess: true,
        metadata: { filename: file.name ?? '', filetype: file.type ?? '' },
        // The stored upload URL belongs to this user: another user's page must not resume it.
        fingerprint: (f, opts) => Promise.resolve(['parley', userId, f.name, f.type, f.size, f.lastModified, opts.endpoint].join('|')),
        onProgress: (sent, total) => onProgress?.(sent, total),
        onError: (e) => {
          if (done) return;
          done = true;
          const status = e?.originalResponse?.getStatus?.() ?? 0;
          let msg = e?.message ?? String(e);
          try { msg = JSON.parse(e.originalResponse.getBody()).error || msg; } catch { /* not JSON */ }
          if (status === 401 && !this._stopped) this._stopWith('autherror', new ParleyError(401, msg));
          reject(new ParleyError(status, `upload: ${msg}`));
        },
        onSuccess: () => {
          if (done) return;
          done = true;
          resolve(decodeURIComponent(new URL(up.url, `${this.baseURL || globalThis.location?.origin}/`).pathname.split('/').pop()));
        },
      });
      signal?.addEventListener('abort', () => {
        if (done) return;
        done = true;
        up.abort(false); // the server keeps the partial upload for a resume (no termination)
        reject(abortError());
      }, { once: true });
      up.findPreviousUploads().then((prev) => {
        if (prev.length) up.resumeFromPreviousUpload(prev[0]);
        if (!done) up.start();
      }, () => { if (!done) up.start(); });
    });
    return this.attachment(id);
  }

  /** The server's metadata of an attachment: GET /v1/attachments/{id}. */
  attachment(id) {
    return this._http('GET', `/v1/attachments/${encodeURIComponent(id)}`);
  }

  /**
   * Sends a message carrying an uploaded attachment, like send: its content type follows
   * the attachment's mime_type (image 2, audio 4, video 5, else file 3), its content is
   * {attachment_id, name?, caption?}. The local copy also carries the metadata as
   * content.attachment, so the page can lay the message out while it is sending; the server
   * stores its own. Returns the client_msg_id.
   */
  sendAttachment(convId, attachment, { name = '', caption = '' } = {}) {
    const content = { attachment_id: attachment.id };
    if (name) content.name = name;
    if (caption) content.caption = caption;
    content.attachment = attachment;
    return this.send(convId, content, { contentType: attachmentContentType(attachment.mime_type) });
  }

  /**
   * Signed URLs of an attachment, for an <img src> or a download link, which cannot send
   * the token: POST /v1/attachments/{id}/urls. Resolves with {content, thumbnail?, expires_at},
   * the URLs absolute. Kept and reused until five minutes before they expire.
   */
  attachmentURLs(id, { expiresIn } = {}) {
    const hit = this._urls.get(id);
    if (hit && !expiresIn && hit.expiresAt - Date.now() > URL_MARGIN) return hit.promise;
    const base = `${this.baseURL || globalThis.location?.origin}/`;
    const promise = this._http('POST', `/v1/attachments/${encodeURIComponent(id)}/urls`, expiresIn ? { expires_in: expiresIn } : {})
      .then((u) => {
        const out = { content: new URL(u.content, base).href, expires_at: u.expires_at };
        if (u.thumbnail) out.thumbnail = new URL(u.thumbnail, base).href;
        if (!expiresIn) this._urls.set(id, { promise, expiresAt: u.expires_at });
        return out;
      });
    if (!expiresIn) {
      this._urls.set(id, { promise, expiresAt: Infinity });
      promise.catch(() => { if (this._urls.get(id)?.promise === promise) this._urls.delete(id); });
    }
    return promise;
  }

  /** Re-queues a failed send. */
  retrySend(clientMsgId) {
    this.state.retrySend(clientMsgId);
    this._afterChange();
    this._flushOutbox();
  }

  /** Drops a pending or failed send. */
  discardSend(clientMsgId) {
    this.state.discardSend(clientMsgId);
    this._afterChange();
  }

  /** Recalls one of the caller's messages (section 6.4). */
  async recall(convId, seq) {
    await this._request('recall', { conv_id: convId, seq });
    this.state._onRecall(convId, { seq });
    this._afterChange();
  }

  /** Marks everything in the conversation as read (if anything is unread). */
  markRead(convId) {
    const c = this.state.conversation(convId);
    if (!c || c.max_seq <= (c.read_seq ?? 0)) return false;
    this.state.setRead(convId, c.max_seq);
    this._positions.read.set(convId, c.max_seq);
    this._afterChange();
    this._flushPositions();
    return true;
  }

  /** Loads older messages (before the oldest loaded one). */
  async loadOlder(convId, limit = 50) {
    const list = this.state.msgs.get(convId) ?? [];
    const c = this.state.conversation(convId);
    const before = list.length ? list[0].seq : (c?.max_seq ?? 0) + 1;
    if (before <= 1) return;
    const r = await this._http('GET', `/v1/conversations/${encodeURIComponent(convId)}/messages?before_seq=${before}&limit=${limit}`);
    this.state.addHistory(convId, r.messages, { before: true, hasMore: r.has_more });
    this._afterChange();
  }

  /** Fills holes between the oldest loaded message and max_seq (after a reset, say). */
  async fillGaps(convId) {
    for (const [from, to] of this.state.gaps(convId)) {
      let after = from - 1;
      while (after < to) {
        const r = await this._pageAfter(convId, after, 200);
        if (!r.messages.length) break;
        after = r.messages[r.messages.length - 1].seq;
        if (!r.has_more) break;
      }
    }
    this._afterChange();
  }

  /**
   * Jumps to a date (section 6.3, "Jump to a date"): fetches the page of up to `limit`
   * messages around the first visible one created at or after `ts` (a Date or Unix ms) and
   * merges it like history. Messages loaded below it that a hole separates from it are
   * dropped, so loadOlder pages down from the page; loadNewer fills the hole above it, up
   * to the newest messages (hasNewer says whether one is left). Resolves with
   * {messages, anchor_seq, has_more_before, has_more_after}: anchor_seq is 0 when every
   * visible message is older than ts (the page is then the newest ones).
   */
  async messagesAround(convId, ts, limit = 50) {
    const ms = Math.max(1, Math.floor(ts instanceof Date ? ts.getTime() : Number(ts)));
    if (!Number.isFinite(ms)) throw new ParleyError(400, 'messagesAround: ts must be a Date or Unix milliseconds');
    const r = await this._http('GET', `/v1/conversations/${encodeURIComponent(convId)}/messages?around_ts=${ms}&limit=${limit}`);
    const page = {
      messages: r.messages ?? [], anchor_seq: r.anchor_seq ?? 0,
      has_more_before: !!r.has_more_before, has_more_after: !!r.has_more_after,
    };
    this.state.addAround(convId, page);
    this._afterChange();
    return page;
  }

  /**
   * Loads the next page of later messages above the page jumped to (messagesAround): up to
   * `limit` from the start of the first hole. Resolves with hasNewer: false once the hole
   * up to the newest messages is filled.
   */
  async loadNewer(convId, limit = 50) {
    const gap = this.state.firstGap(convId);
    if (gap) {
      await this._pageAfter(convId, gap[0] - 1, limit);
      this._afterChange();
    }
    return this.hasNewer(convId);
  }

  /**
   * Leaves a page jumped to without filling the hole: forgets the messages loaded below the
   * newest hole, so the conversation holds its newest messages again (hasNewer is false).
   */
  backToNewest(convId) {
    this.state.keepNewest(convId);
    this._afterChange();
  }

  /** One history page after `after`, merged into the state: GET ...?after_seq=. */
  async _pageAfter(convId, after, limit) {
    const r = await this._http('GET', `/v1/conversations/${encodeURIComponent(convId)}/messages?after_seq=${after}&limit=${limit}`);
    this.state.addHistory(convId, r.messages);
    return r;
  }

  /** Fetches receipts (section 7.2) for the given seqs of a conversation. */
  async refreshReceipts(convId, seqs) {
    let cache = this._receipts.get(convId);
    if (!cache) this._receipts.set(convId, (cache = new Map()));
    let changed = false;
    await Promise.all(seqs.map(async (seq) => {
      try {
        const r = await this._http('GET', `/v1/conversations/${encodeURIComponent(convId)}/receipts?seq=${seq}`);
        const old = cache.get(seq);
        if (!old || old.read_count !== r.read_count || old.delivered_count !== r.delivered_count || old.member_count !== r.member_count) {
          cache.set(seq, r);
          changed = true;
        }
      } catch { /* a receipt is decoration: try again next time */ }
    }));
    if (changed) this._touch(new Set([convId]));
  }

  /**
   * Opens a conversation on the WebSocket (section 9.3): while open, the server pushes each
   * new message of a read-fanout conversation in full instead of a notice, so they appear
   * at once. Call it for the conversation on screen, and closeConversation when leaving;
   * the client opens it again after every reconnect. For other conversations it changes
   * nothing on the server. Resolves when the server answered (or at once when offline).
   */
  async openConversation(convId) {
    this._open.add(convId);
    if (this._ws && this._ws.readyState === 1) await this._openOnSocket(convId);
  }

  /** Undoes openConversation: the server goes back to notices for convId. */
  async closeConversation(convId) {
    if (!this._open.delete(convId)) return;
    if (this._ws && this._ws.readyState === 1) await this._wsCall('close', { conv_id: convId }).catch(() => {});
  }

  async _openOnSocket(convId) {
    try {
      const b = await this._wsCall('open', { conv_id: convId });
      const { id, code, ...brief } = b;
      this.state.applyBriefs(0, [brief]);
      this._afterChange();
      this._schedulePull(convId, 0); // what came before the open; pushes bring what follows
    } catch (e) {
      if (e.code === 404) this._open.delete(convId);
    }
  }

  /**
   * Schedules a pull of a read-fanout conversation after `delay` ms ("jitter": a random
   * wait up to pullDelayMax). A pull already scheduled absorbs later notices (coalescing),
   * unless this one must run now (delay 0: a gap below a push, an open).
   */
  _schedulePull(convId, delay) {
    const ms = delay === 'jitter' ? Math.floor(Math.random() * (this.pullDelayMax + 1)) : delay;
    const old = this._pulls.get(convId);
    if (ms <= 0) {
      if (old !== undefined) this._timers.clear(old);
      this._pulls.delete(convId);
      queueMicrotask(() => this._pull(convId));
      return;
    }
    if (old !== undefined) return;
    this._pulls.set(convId, this._timers.set(() => {
      this._pulls.delete(convId);
      this._pull(convId);
    }, ms));
  }

  /**
   * Fetches the messages of convId after the last seq held, page by page up to max_seq (or
   * up to a held push), honouring a 429's Retry-After; another failure tries again with
   * backoff. One pull per conversation at a time.
   */
  async _pull(convId) {
    if (this._stopped || this._pulling.has(convId)) return;
    this._pulling.add(convId);
    try {
      for (let r = this.state.pullRange(convId); r; r = this.state.pullRange(convId)) {
        const limit = Math.min(200, r.upTo - r.after);
        const page = await this._http('GET', `/v1/conversations/${encodeURIComponent(convId)}/messages?after_seq=${r.after}&limit=${limit}`);
        const n = this.state.addPulled(convId, page.messages ?? []);
        this._afterChange();
        if (!n) break; // nothing newer visible yet: the next notice or push tries again
      }
      this._pullFailures.delete(convId);
    } catch (e) {
      if (this._stopped || e.code === 404) return;
      const failures = (this._pullFailures.get(convId) ?? 0) + 1;
      this._pullFailures.set(convId, failures);
      this._schedulePull(convId, e.code === 429 && e.retryAfter ? e.retryAfter * 1000 : backoffDelay(failures, this.backoff));
    } finally {
      this._pulling.delete(convId);
    }
  }

  /**
   * A group message just sent has been read by nobody yet: its receipts start at 0 of the
   * other members, and the server's receipts pushes move them as members read.
   */
  _seedReceipts(convId, seq) {
    const c = this.state.conversation(convId);
    if (c?.type !== 'group' || !(seq > 0)) return;
    let cache = this._receipts.get(convId);
    if (!cache) this._receipts.set(convId, (cache = new Map()));
    if (!cache.has(seq)) cache.set(seq, { seq, member_count: Math.max(0, (c.members_count ?? 1) - 1), read_count: 0, delivered_count: 0 });
  }

  /** Applies one of read fanout's pushes (section 9.5). */
  _onReadFanoutPush(f) {
    switch (f.op) {
      case 'message':
        if (f.message) this.state.applyPush(f.message);
        break;
      case 'notice':
        this.state.applyNotice(f);
        break;
      case 'changes':
        this.state.applyBriefs(f.mark ?? 0, f.conversations ?? []);
        break;
      case 'typing':
        this._onTyping(f);
        return;
      case 'presence':
        this._applyPresence(f.presence);
        return;
      case 'receipts': {
        let cache = this._receipts.get(f.conv_id);
        if (!cache) this._receipts.set(f.conv_id, (cache = new Map()));
        for (const r of f.receipts ?? []) cache.set(r.seq, r);
        this._touch(new Set([f.conv_id]));
        break;
      }
      default:
        break;
    }
    this._afterChange();
  }

  /** Reconnects now instead of waiting for the backoff (e.g. a "retry" button). */
  reconnectNow() {
    this._attempt = 0;
    this._wakeUp();
  }

  // ---- saving ----

  /** Saves the state now (the client also saves shortly after every change). */
  async saveNow() {
    clearTimeout(this._saveTimer);
    this._saveTimer = null;
    try {
      await this.storage.save(this.storageKey, this.state.toJSON());
    } catch { /* storage full or disabled: the server still has everything */ }
  }

  _scheduleSave() {
    if (this._saveTimer) return;
    this._saveTimer = setTimeout(() => this.saveNow(), this.saveDelay);
  }

  // ---- the connection loop ----

  async _loop() {
    while (!this._stopped) {
      let err = null;
      try {
        this._setStatus('connecting');
        if (!this.state.synced) await this._snapshot();
        if (this._useWebSocket()) await this._runWebSocket();
        else if (await this._runLongPoll() === 'websocket') continue;
      } catch (e) {
        err = e;
      }
      this._closeSocket();
      if (this._stopped) break;
      if (err?.code === 401) {
        this._stopWith('autherror', err);
        return;
      }
      if (err?.code === 'replaced') {
        this._stopWith('replaced', err);
        return;
      }
      if (err?.code === 409 || err?.code === 410) {
        // The cursor cannot be served: start again from a snapshot (section 8.5, step 4).
        this.state.synced = false;
        if (this._attempt++ === 0) continue;
      } else if (err?.code === 'gap') {
        this.stats.gaps++;
        continue; // reconnect at once from the last applied cursor
      }
      this._setStatus('offline');
      const delay = backoffDelay(this._attempt, this.backoff);
      this.dispatchEvent(new CustomEventish('retry', { attempt: this._attempt++, delay }));
      await this._sleep(delay);
    }
  }

  _useWebSocket() {
    return Date.now() >= this._longPollUntil && typeof this.WebSocketImpl === 'function';
  }

  async _snapshot() {
    const snap = await this._fetchSnapshot(this.recent);
    this.stats.snapshots++;
    this.state.applySnapshot(snap, this.recent);
    this._afterChange();
    await this.saveNow();
  }

  _runWebSocket() {
    return new Promise((resolve, reject) => {
      const url = `${this.baseURL.replace(/^http/, 'ws')}/v1/ws?cursor=${this.state.cursor}&mark=${this.state.mark}&token=${encodeURIComponent(this.token)}`;
      let ws;
      try {
        ws = new this.WebSocketImpl(url);
      } catch (e) {
        this._noteWebSocketFailure(); // a bad URL or a blocked scheme: HTTP may still work
        reject(new ParleyError(0, `websocket: ${e.message}`));
        return;
      }
      this._ws = ws;
      this._gapClose = false;
      let opened = false;
      let stable = false;
      let errorPush = null;
      let heartbeat = null;
      let stableTimer = null;
      ws.onopen = () => {
        opened = true;
        heartbeat = setInterval(() => {
          if (this._ws === ws) this._wsCall('ping', {}).catch(() => {});
        }, this.heartbeat);
        // Only a socket that stays open resets the backoff and the failure count: one that
        // the server (or a frame it cannot parse) kills at once must not reconnect at once.
        stableTimer = setTimeout(() => {
          stable = true;
          this._attempt = 0;
          this._wsFailures = 0;
        }, this.stableAfter);
        this.mode = 'websocket';
        this.stats.connects++;
        this._setStatus('online');
        this._onConnected();
      };
      ws.onmessage = (e) => {
        const f = parseFrame(e.data);
        if (!f) return;
        if (f.op === 'event' && f.event) this._ingest([f.event]);
        else if (f.op === 'error') errorPush = f;
        else if (typeof f.id === 'string') this._onReply(f);
        else this._onReadFanoutPush(f);
      };
      ws.onerror = () => {}; // a close event follows
      ws.onclose = (e) => {
        clearInterval(heartbeat);
        clearTimeout(stableTimer);
        if (this._ws === ws) this._ws = null;
        this._failInflight();
        if (errorPush) return reject(new ParleyError(errorPush.code, errorPush.error ?? 'sync error'));
        if (this._gapClose) return reject(new ParleyError('gap', 'cursor gap'));
        if (e.code === 4001) return reject(new ParleyError('replaced', 'another connection of this device took over'));
        if (e.code === 4003) return reject(new ParleyError(401, 'revoked'));
        if (e.code === 4004) return reject(new ParleyError(401, 'token expired'));
        if (opened) {
          if (!stable && !this._stopped) this._noteWebSocketFailure();
          return resolve();
        }
        // The upgrade failed. A browser does not say why, so ask over HTTP: a 401 or a bad
        // cursor shows there; if HTTP works and WebSocket keeps failing, fall back to long-poll.
        this._probe().then(() => {
          // Only failures while HTTP works count: a server that is simply down is not a
          // reason to give up on WebSocket.
          this._noteWebSocketFailure();
          reject(new ParleyError(0, 'websocket unavailable'));
        }, reject);
      };
    });
  }

  /**
   * Counts a WebSocket failure (an upgrade that fails while HTTP works, or a socket that dies
   * before stableAfter); from the fallbackAfter-th in a row, "auto" long-polls for
   * longPollFor. The count is kept, so a socket that still fails afterwards falls back again
   * at once; only a stable socket resets it.
   */
  _noteWebSocketFailure() {
    if (++this._wsFailures >= this.fallbackAfter && this.transport === 'auto') {
      this._longPollUntil = Date.now() + this.longPollFor;
      this.stats.fallbacks++;
    }
  }

  async _probe() {
    await this._http('GET', `/v1/sync?cursor=${this.state.cursor}&limit=1`);
  }

  /** Long-polls until stopped or an error; returns "websocket" when it is time to try it again. */
  async _runLongPoll() {
    this.mode = 'longpoll';
    for (;;) {
      if (this._stopped) return '';
      if (this._useWebSocket()) return 'websocket';
      const wait = this.status === 'online' ? this.pollWait : 0;
      this._pollAbort = new AbortController();
      const r = await this._http('GET', `/v1/sync?cursor=${this.state.cursor}&mark=${this.state.mark}&limit=500&wait=${wait}`, undefined,
        { timeout: (wait + 15) * 1000, signal: this._pollAbort.signal });
      this._attempt = 0;
      if (this.status !== 'online') {
        this.stats.connects++;
        this._setStatus('online');
        this._onConnected();
      }
      this._ingest(r.events ?? []);
      if (r.mark !== undefined || r.conversations) this._onReadFanoutPush({ op: 'changes', mark: r.mark, conversations: r.conversations });
    }
  }

  _onConnected() {
    this._flushOutbox();
    this._flushPositions();
    // Open state lives with the connection: open again what the app has open.
    if (this.mode === 'websocket') {
      for (const id of this._open) this._openOnSocket(id);
      this._restorePresence(); // and so do presence subscriptions
    }
  }

  /** Applies a batch of events in order, stopping at a gap. */
  _ingest(events) {
    for (const ev of events) {
      const r = this.state.applyEvent(ev);
      if (r === 'gap') {
        // Events are missing: drop this connection and resume from the last applied cursor
        // (the server replays everything after it).
        if (this._ws) {
          this._gapClose = true;
          this._ws.close(4000, 'gap');
        } else {
          this.stats.gaps++; // long-poll: the next poll starts from the last applied cursor
        }
        break;
      }
    }
    this._afterChange();
  }

  _afterChange() {
    for (const e of this.state.takeEffects()) this._effect(e);
    const changed = this.state.takeChanged();
    if (changed.size) {
      this._scheduleSave();
      this._touch(changed);
    }
  }

  _effect(e) {
    switch (e.type) {
      case 'delivered': {
        if (e.seq > (this._positions.delivered.get(e.conv_id) ?? 0)) this._positions.delivered.set(e.conv_id, e.seq);
        queueMicrotask(() => this._flushPositions());
        break;
      }
      case 'fetchConv':
        this._fetchConv(e.conv_id);
        break;
      case 'pull':
        this._schedulePull(e.conv_id, e.delay);
        break;
      case 'members':
        this._membersWanted.add(e.conv_id);
        if (!this._membersTimer) this._membersTimer = setTimeout(() => this._fetchMembers(), 50);
        break;
      default:
        break;
    }
  }

  async _fetchConv(convId) {
    try {
      const b = await this._http('GET', `/v1/conversations/${encodeURIComponent(convId)}`);
      this.state.upsertConversation(b);
      this._afterChange();
    } catch { /* next message tries again */ }
  }

  /** Learns who is in the conversations that asked (the brief does not say). */
  async _fetchMembers() {
    const ids = [...this._membersWanted];
    this._membersWanted.clear();
    this._membersTimer = null;
    await Promise.all(ids.map((id) => this.loadMembers(id).catch(() => { /* cosmetic */ })));
  }

  /**
   * GETs a paged call (sections 5.4, 5.5, 8.2) from its first page to its last, handing each
   * page to `visit`. `path` may already have a query.
   */
  async _eachPage(path, visit) {
    const base = `${path}${path.includes('?') ? '&' : '?'}limit=${MAX_LIST_LIMIT}`;
    let after = '';
    for (;;) {
      const page = await this._http('GET', after ? `${base}&after=${encodeURIComponent(after)}` : base);
      visit(page);
      if (!page.has_more) return;
      if (!page.next || page.next === after) throw new ParleyError(0, `GET ${path}: has_more without a new next token`);
      after = page.next;
    }
  }

  /**
   * Fetches every page of a snapshot and assembles them into one (section 8.2): the first
   * page's cursor, every page's conversations, messages and read positions. What changed
   * while the pages were fetched comes with the events after that cursor.
   */
  async _fetchSnapshot(recent) {
    let snap = null;
    await this._eachPage(`/v1/sync/snapshot?recent=${recent}`, (p) => {
      if (!snap) {
        snap = p;
        return;
      }
      snap.conversations.push(...p.conversations);
      Object.assign(snap.messages, p.messages);
      Object.assign(snap.read_positions, p.read_positions);
    });
    return snap;
  }

  // ---- who is who ----

  /**
   * Lists a conversation's members, in order of standing, as [{user_id, name, joined_at,
   * role}] (every page), and keeps them for members() and memberList().
   */
  async loadMembers(convId) {
    const list = [];
    await this._eachPage(`/v1/conversations/${encodeURIComponent(convId)}/members`, (p) => list.push(...p.members));
    this.state.applyMembers(convId, list);
    this._afterChange();
    return list;
  }

  /** Who this client's token speaks for: {user_id, device_id, name}. */
  me() { return this._http('GET', '/v1/me'); }

  /** A user's {user_id, name}; rejects with code 404 for an unknown user. */
  user(userId) { return this._http('GET', `/v1/users/${encodeURIComponent(userId)}`); }

  // ---- sending ----

  async _flushOutbox() {
    if (this._stopped || this.status !== 'online') return;
    const now = Date.now();
    const due = this.state.outbox.filter((p) => p.state === 'sending' && !this._sending.has(p.client_msg_id) && !(p.retryAt > now));
    if (!due.length) return;
    if (this._ws && this._ws.readyState === 1) {
      // Frames of one connection are served in order: pipeline them all.
      await Promise.all(due.map((p) => this._sendOne(p)));
      return;
    }
    if (this._flushingHTTP) return;
    this._flushingHTTP = true;
    try {
      for (const p of due) {
        if (!(await this._sendOne(p))) break; // keep the order: stop at the first failure
      }
    } finally {
      this._flushingHTTP = false;
    }
  }

  async _sendOne(p) {
    const id = p.client_msg_id;
    this._sending.add(id);
    if (p.attempts) this.stats.resent++;
    p.attempts = (p.attempts ?? 0) + 1;
    try {
      const body = { conv_id: p.conv_id, client_msg_id: id, content_type: p.content_type, content: p.content };
      if (p.extra) body.extra = p.extra;
      const ack = await this._request('send', body);
      this.state.applyAck(id, ack);
      this._seedReceipts(p.conv_id, ack.seq);
      this._afterChange();
      this.saveNow();
      return true;
    } catch (e) {
      const outcome = sendOutcome(e.code);
      if (outcome === 'fail') {
        this.state.failSend(id, e.message);
        this._afterChange();
        return true;
      }
      if (e.code === 429 || e.code >= 500) {
        p.retryAt = Date.now() + (e.retryAfter ? e.retryAfter * 1000 : backoffDelay(p.attempts, this.backoff));
        clearTimeout(this._retryTimer);
        this._retryTimer = setTimeout(() => this._flushOutbox(), p.retryAt - Date.now());
      }
      // Network errors: the next connection re-sends it.
      return false;
    } finally {
      this._sending.delete(id);
    }
  }

  async _flushPositions() {
    if (this._stopped || this.status !== 'online') return;
    for (const [kind, m] of Object.entries(this._positions)) {
      for (const [convId, seq] of [...m]) {
        if (kind === 'delivered' && (this._positions.read.get(convId) ?? 0) >= seq) {
          m.delete(convId); // a read raises the delivered position with it
          continue;
        }
        const key = `${kind} ${convId}`;
        if (this._positionBusy.has(key)) continue;
        this._positionBusy.add(key);
        let again = false;
        this._request(kind, { conv_id: convId, seq }).then(
          () => {
            if (m.get(convId) === seq) m.delete(convId);
            else again = true; // moved on while this one was in flight
          },
          () => { /* kept: sent again on the next connection */ },
        ).finally(() => {
          this._positionBusy.delete(key);
          if (again) this._flushPositions();
        });
      }
    }
  }

  // ---- requests ----

  /** Runs a WebSocket op (send, read, delivered, recall) over the socket, else over HTTP. */
  _request(op, params) {
    if (this._ws && this._ws.readyState === 1) return this._wsCall(op, params);
    const conv = encodeURIComponent(params.conv_id ?? '');
    switch (op) {
      case 'send': return this._http('POST', '/v1/messages', params);
      case 'read': return this._http('POST', `/v1/conversations/${conv}/read`, { seq: params.seq });
      case 'delivered': return this._http('POST', `/v1/conversations/${conv}/delivered`, { seq: params.seq });
      case 'recall': return this._http('POST', '/v1/messages/recall', params);
      default: return Promise.reject(new ParleyError(400, `unknown op ${op}`));
    }
  }

  _wsCall(op, params) {
    const ws = this._ws;
    return new Promise((resolve, reject) => {
      const id = String(++this._frameSeq);
      const timer = setTimeout(() => {
        this._inflight.delete(id);
        reject(new ParleyError(0, `${op}: no reply`));
        if (this._ws === ws) ws.close(4000, 'no reply'); // a stuck connection: start a new one
      }, this.requestTimeout);
      this._inflight.set(id, { resolve, reject, timer });
      try {
        ws.send(JSON.stringify({ id, op, ...params }));
      } catch (e) {
        clearTimeout(timer);
        this._inflight.delete(id);
        reject(new ParleyError(0, `${op}: ${e.message}`));
      }
    });
  }

  _onReply(f) {
    const call = this._inflight.get(f.id);
    if (!call) return;
    this._inflight.delete(f.id);
    clearTimeout(call.timer);
    if (f.code === 0) call.resolve(f);
    else {
      if (f.code === 401) this._stopWith('autherror', new ParleyError(401, f.error));
      call.reject(new ParleyError(f.code, f.error ?? 'error', f.retry_after ?? 0));
    }
  }

  _failInflight() {
    for (const [id, call] of this._inflight) {
      clearTimeout(call.timer);
      call.reject(new ParleyError(0, 'connection closed'));
      this._inflight.delete(id);
    }
  }

  async _http(method, path, body, { timeout = this.requestTimeout, signal } = {}) {
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), timeout);
    const onAbort = () => ctrl.abort();
    signal?.addEventListener('abort', onAbort);
    let res;
    let data = null;
    try {
      const headers = { Authorization: `Bearer ${this.token}` };
      if (body !== undefined) headers['Content-Type'] = 'application/json';
      res = await this.fetchImpl(this.baseURL + path, {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: ctrl.signal, cache: 'no-store',
      });
      data = await res.json().catch(() => null);
    } catch (e) {
      throw new ParleyError(0, `network: ${e?.message ?? e}`);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
    if (!res.ok) {
      const err = new ParleyError(res.status, data?.error ?? `HTTP ${res.status}`, Number(res.headers.get('Retry-After')) || 0);
      if (res.status === 401 && !this._stopped) this._stopWith('autherror', err);
      throw err;
    }
    return data;
  }

  // ---- plumbing ----

  _closeSocket() {
    const ws = this._ws;
    this._ws = null;
    if (ws && ws.readyState <= 1) {
      try { ws.close(1000); } catch { /* already closing */ }
    }
    this._failInflight();
  }

  _stopWith(type, err) {
    if (this._stopped) return;
    this.stop();
    this.dispatchEvent(new CustomEventish(type, { error: err }));
  }

  _setStatus(s) {
    if (this.status === s) return;
    this.status = s;
    this.dispatchEvent(new CustomEventish('status', { status: s, transport: this.mode }));
  }

  _touch(convs) {
    for (const c of convs) this._pendingChanged.add(c);
    if (this._emitScheduled) return;
    this._emitScheduled = true;
    queueMicrotask(() => {
      this._emitScheduled = false;
      const detail = { convs: this._pendingChanged };
      this._pendingChanged = new Set();
      this.dispatchEvent(new CustomEventish('change', detail));
    });
  }

  _sleep(ms) {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this._wake = done;
    }).finally(() => { this._wake = null; });
  }

  _wakeUp() {
    this._wake?.();
  }
}

function parseFrame(data) {
  try {
    const f = JSON.parse(typeof data === 'string' ? data : new TextDecoder().decode(data));
    return f && typeof f === 'object' ? f : null;
  } catch {
    return null;
  }
}

/** CustomEvent where it exists (browsers, Node 19+), else an Event carrying detail. */
class CustomEventish extends Event {
  constructor(type, detail) {
    super(type);
    this.detail = detail;
  }
}
