// SPDX-License-Identifier: Apache-2.0
// Parley reference JavaScript SDK: the model (imported by parley.js, which re-exports it).
//
// ChatState and the helpers here are pure and synchronous: no network, no timers, no storage.
// They hold a device's view of one user's conversations and implement the merge rules of
// docs/protocol.md: messages merge by (conv_id, seq), positions only move forward, events
// apply in cursor order with replays ignored and gaps refused. The unit tests in
// web/sdktest exercise them directly.

/** Content types of section 6.1. */
export const ContentType = Object.freeze({ TEXT: 1, IMAGE: 2, FILE: 3, AUDIO: 4, VIDEO: 5 });

/** MsgState of section 6.5, plus FAILED (a send the server refused for good; client only). */
export const MsgState = Object.freeze({ FAILED: 0, SENDING: 1, SENT: 2, DELIVERED: 3, READ: 4, RECALLED: 5 });

/** Version of the saved state; a saved value of another version is ignored. */
export const STATE_VERSION = 1;

/** Messages kept per conversation in saved state (the newest ones). */
const SAVED_MESSAGES = 200;

// ---------------------------------------------------------------------------------------------
// Pure helpers (exported for the unit tests).

/**
 * Delay before reconnect attempt number `attempt` (0 based): exponential, capped at `max`,
 * with "equal jitter" (between half and all of the capped value), so that many clients
 * dropped by one restart do not come back in step.
 */
export function backoffDelay(attempt, { base = 250, max = 10000, random = Math.random } = {}) {
  const cap = Math.min(max, base * 2 ** Math.min(Math.max(attempt, 0), 30));
  return Math.round(cap / 2 + (random() * cap) / 2);
}

/**
 * What to do with a send that failed with `code`: "retry" it later with the same
 * client_msg_id (network failure, 429, 5xx: the server may or may not have stored it, and the
 * retry is deduplicated), stop for "auth" (401), or "fail" it for good (400, 403, 404, 413).
 */
export function sendOutcome(code) {
  if (code === 0 || code === 429 || code >= 500) return 'retry';
  if (code === 401) return 'auth';
  return 'fail';
}

/** How an event with cursor `next` relates to the last applied cursor: apply, dup or gap. */
export function cursorStep(current, next) {
  if (next <= current) return 'dup';
  return next === current + 1 ? 'apply' : 'gap';
}

/**
 * The inclusive ranges of sequence numbers in [lo, hi] that are missing from `seqs`
 * (ascending, unique): the holes a client fills with history calls.
 */
export function missingRanges(seqs, lo, hi) {
  const out = [];
  let next = lo;
  for (const s of seqs) {
    if (s < next) continue;
    if (s > hi) break;
    if (s > next) out.push([next, s - 1]);
    next = s + 1;
  }
  if (next <= hi) out.push([next, hi]);
  return out;
}

/**
 * Merges two copies of the same message (same conv_id and seq). A recall is final: once either
 * copy is recalled, the result is recalled with no content, whatever order they came in.
 */
export function mergeMessage(old, incoming) {
  if (!old) return { ...incoming };
  const m = { ...old, ...incoming };
  if (old.recalled || incoming.recalled) {
    m.recalled = true;
    m.content = null;
    m.extra = null;
  }
  return m;
}

/** Inserts (or merges) msg into list, kept ascending by seq. Returns true if list changed. */
export function insertMessage(list, msg) {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (list[mid].seq < msg.seq) lo = mid + 1;
    else hi = mid;
  }
  if (lo < list.length && list[lo].seq === msg.seq) {
    const merged = mergeMessage(list[lo], msg);
    if (sameMessage(merged, list[lo])) return false;
    list[lo] = merged;
    return true;
  }
  list.splice(lo, 0, { ...msg });
  return true;
}

function sameMessage(a, b) {
  return a.recalled === b.recalled && a.msg_id === b.msg_id && a.created_at === b.created_at &&
    JSON.stringify(a.content) === JSON.stringify(b.content);
}

/** The text to show for a message's content (text messages carry {"text": ...}; an attachment's is its caption). */
export function messageText(msg) {
  if (!msg) return '';
  if (msg.recalled) return '';
  const c = msg.content;
  if (typeof c === 'string') return c;
  if (c && typeof c.text === 'string') return c.text;
  if (attachmentOf(msg)) return c.caption ?? '';
  if (c && typeof c.url === 'string') return c.url;
  return c == null ? '' : JSON.stringify(c);
}

/**
 * The content type of a message that carries an attachment of this MIME type (the server's
 * sniffed mime_type): image/* is an image, audio/* audio, video/* video, anything else a file.
 */
export function attachmentContentType(mimeType) {
  const top = String(mimeType ?? '').split('/')[0].toLowerCase();
  return { image: ContentType.IMAGE, audio: ContentType.AUDIO, video: ContentType.VIDEO }[top] ?? ContentType.FILE;
}

/**
 * The attachment content of a message ({attachment_id, name?, caption?, attachment?}, where
 * attachment is the server's metadata: mime_type, size, width, height, preview...), or null
 * for other content types, recalled messages and malformed content.
 */
export function attachmentOf(msg) {
  if (!msg || msg.recalled) return null;
  if (!(msg.content_type >= ContentType.IMAGE && msg.content_type <= ContentType.VIDEO)) return null;
  const c = msg.content;
  return c && typeof c === 'object' && typeof c.attachment_id === 'string' && c.attachment_id ? c : null;
}

/** A short label for a message's attachment, for previews and notifications ("Photo", a file's name). */
export function attachmentLabel(msg) {
  const a = attachmentOf(msg);
  if (!a) return '';
  switch (msg.content_type) {
    case ContentType.IMAGE: return 'Photo';
    case ContentType.AUDIO: return 'Audio';
    case ContentType.VIDEO: return 'Video';
    default: return a.name ? `File: ${a.name}` : 'File';
  }
}

/** A human-readable byte count: 0 B, 999 B, 1.5 KB, 12 MB (powers of 1024, one decimal under 10). */
export function formatBytes(n) {
  n = Number(n) || 0;
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  const v = i === 0 || n >= 10 ? Math.round(n) : Math.round(n * 10) / 10;
  return `${v} ${units[i]}`;
}

/** A random client_msg_id (a UUID; section 2 allows [A-Za-z0-9_-]{1,64}). */
export function newClientMsgID() {
  if (globalThis.crypto?.randomUUID) return globalThis.crypto.randomUUID();
  const b = new Uint8Array(16);
  globalThis.crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

const max = (a, b) => Math.max(a ?? 0, b ?? 0);

// ---------------------------------------------------------------------------------------------
// ChatState: the model. Pure and synchronous.

/**
 * The state of one user's device: conversations, messages, positions, outbox and cursor.
 *
 * Every `apply*` method is idempotent and commutes with replays: messages merge by
 * (conv_id, seq), positions only move forward, and events at or below the cursor are ignored.
 * Methods that need I/O to finish their job push an effect onto `effects` (for ParleyClient
 * to carry out): {type: "delivered", conv_id, seq}, {type: "fetchConv", conv_id} or
 * {type: "members", conv_id}.
 */
export class ChatState {
  constructor(me = '') {
    this.me = me;
    this.cursor = 0;
    this.mark = 0; // the sync mark (section 10), saved and sent beside the cursor
    this.synced = false; // holds a snapshot (or saved state) that cursor describes
    this.convs = new Map(); // conv_id -> conversation (a brief plus client fields)
    this.msgs = new Map(); // conv_id -> [Message] ascending by seq
    this.readers = new Map(); // conv_id -> Map(user_id -> read_seq)
    this.memberLists = new Map(); // conv_id -> [{user_id, name, joined_at, role}] as last listed
    this.outbox = []; // pending sends, oldest first
    this.older = new Map(); // conv_id -> false when no older messages exist on the server
    this.effects = [];
    this.changed = new Set(); // conv_ids changed since the last takeChanged()
    this.held = new Map(); // conv_id -> Map(seq -> message) pushed past a gap (read fanout; not saved)
  }

  // ---- reading the state ----

  /** Visible conversations, most recently active first (ties by conv_id, as the server). */
  conversations() {
    return [...this.convs.values()]
      .filter((c) => !c.hidden && c.type)
      .sort((a, b) => (b.updated_at - a.updated_at) || (a.conv_id < b.conv_id ? -1 : a.conv_id > b.conv_id ? 1 : 0));
  }

  conversation(convId) {
    return this.convs.get(convId) ?? null;
  }

  /** Unread count: max_seq - max(read_seq, visible_from), never below 0. */
  unread(convId) {
    const c = this.convs.get(convId);
    return c ? Math.max(0, c.max_seq - c.floor) : 0;
  }

  /** The other user of a direct conversation, when known. */
  peerOf(convId) {
    const c = this.convs.get(convId);
    if (!c || c.type !== 'direct') return '';
    if (c.peer_id) return c.peer_id;
    for (const u of this.readers.get(convId)?.keys() ?? []) {
      if (u !== this.me) return u;
    }
    return '';
  }

  /** Known members of a conversation (from read positions and member lists), sorted. */
  members(convId) {
    return [...(this.readers.get(convId)?.keys() ?? [])].sort();
  }

  /** The members as the server last listed them (with names and roles), or null. */
  memberList(convId) {
    return this.memberLists.get(convId) ?? null;
  }

  /** Confirmed messages (ascending seq) followed by this conversation's pending sends. */
  messages(convId) {
    const list = (this.msgs.get(convId) ?? []).map((m) => ({ ...m, pending: false }));
    for (const p of this.outbox) {
      if (p.conv_id === convId) {
        list.push({
          conv_id: p.conv_id, seq: 0, msg_id: '', client_msg_id: p.client_msg_id, sender_id: this.me,
          content_type: p.content_type, content: p.content, extra: p.extra ?? null,
          created_at: p.created_local, recalled: false, pending: true, failed: p.state === 'failed', error: p.error ?? '',
        });
      }
    }
    return list;
  }

  /** MsgState of a message as its sender sees it (section 6.5). */
  msgState(msg) {
    if (msg.recalled) return MsgState.RECALLED;
    if (msg.pending) return msg.failed ? MsgState.FAILED : MsgState.SENDING;
    const c = this.convs.get(msg.conv_id);
    if (c && c.type === 'direct') {
      if (msg.seq <= (c.peer_read_seq ?? 0)) return MsgState.READ;
      if (msg.seq <= (c.peer_delivered_seq ?? 0)) return MsgState.DELIVERED;
    }
    return MsgState.SENT;
  }

  /** The sorted seqs of loaded messages, and the holes between the oldest one and max_seq. */
  gaps(convId) {
    const list = this.msgs.get(convId) ?? [];
    const c = this.convs.get(convId);
    if (!c || list.length === 0) return [];
    return missingRanges(list.map((m) => m.seq), list[0].seq, c.max_seq);
  }

  /**
   * The first hole above the oldest loaded message, [from, to], or null when the loaded
   * messages reach max_seq without one: after a jump to a date (addAround), the messages
   * between the page jumped to and the newest ones, which loadNewer fetches.
   */
  firstGap(convId) {
    return this.gaps(convId)[0] ?? null;
  }

  /** False once the server said no older visible messages exist. */
  hasOlder(convId) {
    const list = this.msgs.get(convId) ?? [];
    if (list.length && list[0].seq <= 1) return false;
    const c = this.convs.get(convId);
    if (!list.length && c && c.max_seq === 0) return false;
    return this.older.get(convId) !== false;
  }

  /** Returns and clears the set of conversations changed since the last call. */
  takeChanged() {
    const s = this.changed;
    this.changed = new Set();
    return s;
  }

  /** Returns and clears the pending effects. */
  takeEffects() {
    const e = this.effects;
    this.effects = [];
    return e;
  }

  // ---- applying server data ----

  /**
   * Replaces everything but the outbox with a snapshot (section 8.2); `recent` is the number
   * of messages per conversation it was asked for.
   */
  applySnapshot(snap, recent = undefined) {
    this.cursor = snap.cursor;
    this.mark = snap.mark ?? 0;
    this.held = new Map();
    const old = this.convs;
    this.convs = new Map();
    this.msgs = new Map();
    this.readers = new Map();
    this.memberLists = new Map();
    this.older = new Map();
    for (const [convId, positions] of Object.entries(snap.read_positions ?? {})) {
      this.readers.set(convId, new Map(Object.entries(positions)));
    }
    for (const b of snap.conversations ?? []) {
      const prev = old.get(b.conv_id);
      const c = this._fromBrief(b, prev?.peer_id ? { peer_id: prev.peer_id } : null, true);
      // Like the cursor, a read-fanout conversation resumes after the snapshot's max_seq.
      if (c.fanout === 'read') c.have = c.max_seq;
      this.convs.set(b.conv_id, c);
      this.changed.add(b.conv_id);
    }
    for (const [convId, list] of Object.entries(snap.messages ?? {})) {
      for (const m of list) this._putMessage(m);
      // Fewer than the `recent` asked for: these are all the visible messages.
      if (recent !== undefined && list.length < recent) this.older.set(convId, false);
    }
    for (const c of this.convs.values()) {
      this._learnFromReaders(c.conv_id);
      this._queueDelivered(c);
    }
    for (const c of old.values()) if (!this.convs.has(c.conv_id)) this.changed.add(c.conv_id);
    this.synced = true;
    this._resolveOutboxFromMessages();
  }

  /**
   * Applies one sync event. Returns "applied", "dup" (cursor already applied: ignored) or "gap"
   * (events are missing before it: nothing applied; the caller must fetch from `cursor`).
   */
  applyEvent(ev) {
    const step = cursorStep(this.cursor, ev.cursor);
    if (step !== 'apply') return step;
    this.cursor = ev.cursor;
    const d = ev.data ?? {};
    switch (ev.type) {
      case 'message': this._onMessage(d); break;
      case 'read': this._onPosition(ev.conv_id, d.user_id, d.read_seq, true); break;
      case 'delivered': this._onPosition(ev.conv_id, d.user_id, d.delivered_seq, false); break;
      case 'recall': this._onRecall(ev.conv_id, d); break;
      case 'conv_deleted': this._onDeleted(ev.conv_id, d.cleared_seq ?? 0); break;
      case 'conv_updated': this.upsertConversation(d, { fromEvent: true }); break;
      default: break; // unknown event types are skipped, as the protocol may add some
    }
    return 'applied';
  }

  /**
   * Merges a brief (from an API answer or a conv_updated event) into the state. A brief with
   * `removed: true` (the user left or was removed) drops the conversation instead: it is no
   * longer theirs, and the server now answers 404 for it. Returns the conversation, or null.
   */
  upsertConversation(brief, { fromEvent = false, peerId = '', hiddenStays = false } = {}) {
    if (brief.removed) {
      this._forget(brief.conv_id);
      return null;
    }
    const old = this.convs.get(brief.conv_id);
    const c = this._fromBrief(brief, old, false);
    if (peerId) c.peer_id = peerId;
    // A conv_updated reaches a user who deleted the conversation for membership changes too;
    // only a re-created direct conversation (or an answer to our own call) un-hides it.
    c.hidden = old?.hidden && (hiddenStays || (fromEvent && brief.type !== 'direct')) ? true : false;
    // Where this device's read-fanout messages end: a conversation that switches resumes
    // after the last message its events brought; one new to this device starts at its read
    // floor (the unread messages are fetched, older ones are loadOlder's).
    if (c.fanout === 'read' && c.have === undefined) c.have = Math.max(this._lastHeld(c.conv_id), old?.type ? (old.max_seq ?? 0) : c.floor);
    this.convs.set(c.conv_id, c);
    this.changed.add(c.conv_id);
    // A listed membership may be stale after a change: list it again.
    const stale = fromEvent && this.memberLists.has(c.conv_id);
    if (stale || (c.type === 'direct' && !this.peerOf(c.conv_id))) this.effects.push({ type: 'members', conv_id: c.conv_id });
    return c;
  }

  /** Adds messages from a history page (section 6.3). */
  addHistory(convId, messages, { before = false, hasMore = true } = {}) {
    for (const m of messages) this._putMessage(m);
    if (before && !hasMore) this.older.set(convId, false);
    this.changed.add(convId);
    this._resolveOutboxFromMessages();
  }

  /**
   * Adds the page of a jump to a date (section 6.3, around_ts): its messages, and what it
   * says of older ones. Loaded messages below the page that a hole separates from it are
   * dropped (the server still has them), so that the page starts the loaded messages:
   * loadOlder pages down from it, and the hole above it, up to the newest messages, is
   * firstGap's, which loadNewer fills.
   */
  addAround(convId, page) {
    const messages = page.messages ?? [];
    for (const m of messages) this._putMessage(m);
    this.changed.add(convId);
    if (!messages.length) return;
    const list = this.msgs.get(convId) ?? [];
    const i = runStart(list, list.findIndex((m) => m.seq === messages[0].seq));
    if (i > 0) list.splice(0, i);
    if (list[0].seq === messages[0].seq) {
      if (page.has_more_before) this.older.delete(convId);
      else this.older.set(convId, false);
    }
    this._resolveOutboxFromMessages();
  }

  /**
   * Forgets the messages below the newest hole (a page jumped to, and what was loaded around
   * it): the newest messages remain, and loadOlder pages down from them again.
   */
  keepNewest(convId) {
    const list = this.msgs.get(convId);
    const i = list?.length ? runStart(list, list.length - 1) : 0;
    if (i === 0) return;
    list.splice(0, i);
    this.older.delete(convId);
    this.changed.add(convId);
  }

  /** Read positions of every member, from a snapshot's read_positions (members only). */
  applyReadPositions(readPositions) {
    for (const [convId, positions] of Object.entries(readPositions ?? {})) {
      const m = this.readers.get(convId) ?? new Map();
      for (const [u, s] of Object.entries(positions)) m.set(u, max(m.get(u), s));
      this.readers.set(convId, m);
      this._learnFromReaders(convId);
      this.changed.add(convId);
    }
  }

  /**
   * The members of a conversation from GET /v1/conversations/{id}/members (section 5.5): who
   * is a member replaces what read positions suggested (a device that was online when the
   * group was created never saw them), and positions already known are kept.
   */
  applyMembers(convId, members) {
    const old = this.readers.get(convId) ?? new Map();
    this.readers.set(convId, new Map(members.map((m) => [m.user_id, old.get(m.user_id) ?? 0])));
    this.memberLists.set(convId, members);
    this._learnFromReaders(convId);
    this.changed.add(convId);
  }

  // ---- read fanout (section 10): briefs, notices, pushes and pulls ----

  /**
   * Applies a sync mark and the briefs of read-fanout conversations that came with it (a
   * sync answer, or the WebSocket's "changes" frame). Briefs are state: applying one again,
   * or an older one, changes nothing. A conversation with messages past the last seq held
   * gets a {type: "pull", conv_id, delay: "jitter"} effect: fetch them after a random wait.
   */
  applyBriefs(mark, briefs = []) {
    this.mark = max(this.mark, mark);
    for (const b of briefs) {
      const old = this.convs.get(b.conv_id);
      const c = this.upsertConversation(b, { hiddenStays: !(b.max_seq > (old?.max_seq ?? 0)) });
      if (!c || c.fanout !== 'read') continue;
      if (c.max_seq > this.readHave(c.conv_id)) this.effects.push({ type: 'pull', conv_id: c.conv_id, delay: 'jitter' });
    }
  }

  /**
   * Applies a notice ({conv_id, max_seq, unread, members_count, pull_delay_ms}): the
   * counters at once (unread is the server's), then a {type: "pull", delay} effect. A notice
   * of a conversation without a brief asks for the brief instead.
   */
  applyNotice(n) {
    const c = this.convs.get(n.conv_id);
    if (!c || !c.type) {
      this.effects.push({ type: 'fetchConv', conv_id: n.conv_id });
      return;
    }
    if (n.max_seq >= (c.max_seq ?? 0)) {
      c.max_seq = n.max_seq;
      if (n.members_count) c.members_count = n.members_count;
      c.floor = max(c.floor, n.max_seq - (n.unread ?? 0));
      c.hidden = false;
    }
    this.changed.add(c.conv_id);
    if (c.max_seq > this.readHave(c.conv_id)) this.effects.push({ type: 'pull', conv_id: c.conv_id, delay: Math.max(0, n.pull_delay_ms ?? 0) });
  }

  /**
   * Applies a message pushed for an open read-fanout conversation. Returns "applied", "dup"
   * (a seq already held: dropped) or "gap" (seqs are missing before it: it is held, and a
   * {type: "pull", delay: 0} effect fetches the gap first).
   */
  applyPush(m) {
    const c = this.convs.get(m.conv_id);
    if (!c) {
      this.effects.push({ type: 'fetchConv', conv_id: m.conv_id });
      return 'gap';
    }
    const have = this.readHave(m.conv_id);
    if (m.seq <= have) return 'dup';
    if (m.seq === have + 1) {
      this._onMessage(m);
      c.have = m.seq;
      this._drainHeld(c);
      return 'applied';
    }
    let h = this.held.get(m.conv_id);
    if (!h) this.held.set(m.conv_id, (h = new Map()));
    if (h.size < 1000) h.set(m.seq, m);
    c.max_seq = max(c.max_seq, m.seq);
    this.changed.add(m.conv_id);
    this.effects.push({ type: 'pull', conv_id: m.conv_id, delay: 0 });
    return 'gap';
  }

  /** The last seq of a read-fanout conversation held without a gap below it. */
  readHave(convId) {
    const c = this.convs.get(convId);
    return max(c?.have, c?.cleared_seq);
  }

  /**
   * What a pull of convId must fetch: messages after `after` up to `upTo` (the seq below the
   * first held push, or max_seq), or null when nothing is missing.
   */
  pullRange(convId) {
    const c = this.convs.get(convId);
    if (!c || c.fanout !== 'read') return null; // write fanout: messages are events
    this._drainHeld(c);
    const after = this.readHave(convId);
    const h = this.held.get(convId);
    const upTo = h?.size ? Math.min(...h.keys()) - 1 : c.max_seq;
    return after < upTo ? { after, upTo } : null;
  }

  /** Adds a page fetched by a pull, in seq order; returns how many messages were new. */
  addPulled(convId, messages) {
    const c = this.convs.get(convId);
    if (!c) return 0;
    let n = 0;
    for (const m of [...messages].sort((a, b) => a.seq - b.seq)) {
      if (m.seq <= this.readHave(convId)) continue;
      this._onMessage(m);
      c.have = m.seq;
      n++;
    }
    this._drainHeld(c);
    this.changed.add(convId);
    return n;
  }

  /** Read-fanout conversations with messages announced but not held (after a reload, say). */
  pendingPulls() {
    return [...this.convs.values()].filter((c) => c.fanout === 'read' && c.max_seq > this.readHave(c.conv_id)).map((c) => c.conv_id);
  }

  _drainHeld(c) {
    const h = this.held.get(c.conv_id);
    if (!h) return;
    for (;;) {
      const next = this.readHave(c.conv_id) + 1;
      const m = h.get(next);
      if (!m) break;
      h.delete(next);
      this._onMessage(m);
      c.have = next;
    }
    for (const seq of h.keys()) if (seq <= this.readHave(c.conv_id)) h.delete(seq);
    if (!h.size) this.held.delete(c.conv_id);
  }

  _lastHeld(convId) {
    const list = this.msgs.get(convId);
    return list?.length ? list[list.length - 1].seq : 0;
  }

  // ---- local changes ----

  /** Queues a message for sending and returns its outbox entry. */
  enqueue(convId, contentType, content, extra = null, now = Date.now()) {
    const p = { conv_id: convId, client_msg_id: newClientMsgID(), content_type: contentType, content, extra, created_local: now, state: 'sending' };
    this.outbox.push(p);
    this.changed.add(convId);
    return p;
  }

  /** Applies the ack of a pending send (section 6.1). Returns false for an unknown id. */
  applyAck(clientMsgId, ack) {
    const i = this.outbox.findIndex((p) => p.client_msg_id === clientMsgId);
    if (i < 0) return false;
    const p = this.outbox[i];
    this.outbox.splice(i, 1);
    if (ack.conv_id === p.conv_id) {
      this._onMessage({
        conv_id: ack.conv_id, seq: ack.seq, msg_id: ack.msg_id, client_msg_id: clientMsgId, sender_id: this.me,
        content_type: p.content_type, content: p.content, extra: p.extra ?? null, created_at: ack.created_at, recalled: false,
      });
    }
    this.changed.add(p.conv_id);
    return true;
  }

  /** Marks a pending send as refused for good. */
  failSend(clientMsgId, error) {
    const p = this.outbox.find((x) => x.client_msg_id === clientMsgId);
    if (!p) return;
    p.state = 'failed';
    p.error = error;
    this.changed.add(p.conv_id);
  }

  /** Puts a failed send back in the queue (same client_msg_id). */
  retrySend(clientMsgId) {
    const p = this.outbox.find((x) => x.client_msg_id === clientMsgId);
    if (!p) return;
    p.state = 'sending';
    delete p.error;
    this.changed.add(p.conv_id);
  }

  /** Drops a pending send from the outbox. */
  discardSend(clientMsgId) {
    const i = this.outbox.findIndex((x) => x.client_msg_id === clientMsgId);
    if (i < 0) return;
    this.changed.add(this.outbox[i].conv_id);
    this.outbox.splice(i, 1);
  }

  /** The caller's own read position moved (optimistically, before the server confirms). */
  setRead(convId, seq) {
    this._onPosition(convId, this.me, seq, true);
  }

  // ---- saving ----

  toJSON() {
    const msgs = {};
    // The newest messages without a hole among them: a page jumped to, far below the newest,
    // is not kept (a reload would otherwise fetch everything between them).
    for (const [convId, list] of this.msgs) msgs[convId] = newestRun(list).slice(-SAVED_MESSAGES);
    const readers = {};
    for (const [convId, m] of this.readers) readers[convId] = Object.fromEntries(m);
    const older = {};
    // "Nothing older" is about the oldest message held: kept only while it is saved too.
    for (const [convId, v] of this.older) if (v === false && (this.msgs.get(convId)?.[0]?.seq ?? 0) === (msgs[convId]?.[0]?.seq ?? 0)) older[convId] = false;
    return {
      v: STATE_VERSION, me: this.me, cursor: this.cursor, mark: this.mark, synced: this.synced,
      convs: [...this.convs.values()], msgs, readers, older,
      outbox: this.outbox.map(({ conv_id, client_msg_id, content_type, content, extra, created_local, state, error }) =>
        ({ conv_id, client_msg_id, content_type, content, extra, created_local, state, error })),
    };
  }

  static fromJSON(o, me = '') {
    const s = new ChatState(me || o.me || '');
    if (!o || o.v !== STATE_VERSION || (me && o.me && o.me !== me)) return s;
    s.cursor = o.cursor ?? 0;
    s.mark = o.mark ?? 0;
    s.synced = !!o.synced;
    for (const c of o.convs ?? []) s.convs.set(c.conv_id, c);
    for (const [convId, list] of Object.entries(o.msgs ?? {})) s.msgs.set(convId, list);
    for (const [convId, m] of Object.entries(o.readers ?? {})) s.readers.set(convId, new Map(Object.entries(m)));
    for (const [convId, v] of Object.entries(o.older ?? {})) s.older.set(convId, v);
    s.outbox = (o.outbox ?? []).filter((p) => p && p.client_msg_id && p.conv_id);
    return s;
  }

  // ---- internals ----

  _fromBrief(b, old, reset) {
    const c = reset || !old ? { ...b } : { ...old, ...b };
    for (const k of ['max_seq', 'read_seq', 'delivered_seq', 'cleared_seq', 'peer_read_seq', 'peer_delivered_seq', 'updated_at']) {
      if (b[k] === undefined && (!old || old[k] === undefined)) continue;
      c[k] = reset ? (b[k] ?? 0) : max(old?.[k], b[k]);
    }
    if (c.type === 'direct') {
      c.peer_read_seq = c.peer_read_seq ?? 0;
      c.peer_delivered_seq = max(c.peer_delivered_seq, c.peer_read_seq);
    }
    c.delivered_seq = max(c.delivered_seq, c.read_seq);
    // The brief's unread count gives max(read_seq, visible_from) exactly: max_seq - unread.
    c.floor = Math.max(reset ? 0 : (old?.floor ?? 0), (b.max_seq ?? 0) - (b.unread ?? 0), c.read_seq ?? 0, c.cleared_seq ?? 0);
    const oldLast = reset ? null : old?.last_message;
    c.last_message = pickLast(oldLast, b.last_message, c.cleared_seq);
    c.peer_id = old?.peer_id ?? b.peer_id ?? '';
    c.hidden = false;
    return c;
  }

  _putMessage(m) {
    const c = this.convs.get(m.conv_id);
    if (c && m.seq <= (c.cleared_seq ?? 0)) return false;
    let list = this.msgs.get(m.conv_id);
    if (!list) this.msgs.set(m.conv_id, (list = []));
    const changed = insertMessage(list, m);
    if (changed) this.changed.add(m.conv_id);
    return changed;
  }

  _onMessage(m) {
    let c = this.convs.get(m.conv_id);
    if (!c) {
      // A message for a conversation we have no brief of (e.g. our saved state predates it):
      // keep what the message says and ask the server for the rest.
      c = { conv_id: m.conv_id, type: '', name: '', max_seq: 0, read_seq: 0, delivered_seq: 0, cleared_seq: 0, floor: 0, updated_at: 0, last_message: null, peer_id: '', hidden: false };
      this.convs.set(m.conv_id, c);
      this.effects.push({ type: 'fetchConv', conv_id: m.conv_id });
    }
    if (m.seq <= (c.cleared_seq ?? 0)) return; // history cleared by conv_deleted
    c.hidden = false; // a new message makes a deleted conversation visible again
    c.max_seq = max(c.max_seq, m.seq);
    c.updated_at = max(c.updated_at, m.created_at);
    c.last_message = pickLast(c.last_message, m, c.cleared_seq);
    this._putMessage(m);
    if (c.fanout === 'read' && m.seq === this.readHave(m.conv_id) + 1) c.have = m.seq; // e.g. our own send's ack
    if (!this.me && this.outbox.some((p) => p.client_msg_id === m.client_msg_id)) this.me = m.sender_id;
    if (m.sender_id === this.me) {
      // Sending advances the sender's own positions (section 6.1).
      this._resolveOutbox(m);
      this._onPosition(m.conv_id, this.me, m.seq, true);
    } else {
      if (c.type === 'direct' && !c.peer_id) c.peer_id = m.sender_id;
      this._onPosition(m.conv_id, m.sender_id, m.seq, true);
      this._queueDelivered(c);
    }
    this.changed.add(m.conv_id);
  }

  _onPosition(convId, userId, seq, isRead) {
    const c = this.convs.get(convId);
    if (!c || !userId) return;
    if (isRead) {
      const r = this.readers.get(convId) ?? new Map();
      r.set(userId, max(r.get(userId), seq));
      this.readers.set(convId, r);
    }
    if (userId === this.me) {
      if (isRead) {
        c.read_seq = max(c.read_seq, Math.min(seq, c.max_seq));
        c.floor = max(c.floor, c.read_seq);
      }
      c.delivered_seq = max(c.delivered_seq, isRead ? c.read_seq : Math.min(seq, c.max_seq));
    } else if (c.type === 'direct' || c.type === '') {
      if (!c.peer_id && c.type === 'direct') c.peer_id = userId;
      if (isRead) c.peer_read_seq = max(c.peer_read_seq, seq);
      c.peer_delivered_seq = max(c.peer_delivered_seq, isRead ? c.peer_read_seq : seq);
    }
    this.changed.add(convId);
  }

  _onRecall(convId, d) {
    const list = this.msgs.get(convId);
    const m = list?.find((x) => x.seq === d.seq);
    if (m) {
      m.recalled = true;
      m.content = null;
      m.extra = null;
    }
    const c = this.convs.get(convId);
    if (c?.last_message && c.last_message.seq === d.seq) {
      c.last_message = { ...c.last_message, recalled: true, content: null, extra: null };
    }
    this.changed.add(convId);
  }

  _onDeleted(convId, clearedSeq) {
    const c = this.convs.get(convId);
    if (!c) return;
    c.cleared_seq = max(c.cleared_seq, clearedSeq);
    c.floor = max(c.floor, c.cleared_seq);
    c.hidden = true;
    if (c.last_message && c.last_message.seq <= c.cleared_seq) c.last_message = null;
    const list = this.msgs.get(convId);
    if (list) this.msgs.set(convId, list.filter((m) => m.seq > c.cleared_seq));
    this.changed.add(convId);
  }

  /** Drops everything held about a conversation, and the sends still pending to it. */
  _forget(convId) {
    for (const m of [this.convs, this.msgs, this.readers, this.older]) m.delete(convId);
    this.outbox = this.outbox.filter((p) => p.conv_id !== convId);
    this.changed.add(convId);
  }

  _learnFromReaders(convId) {
    const c = this.convs.get(convId);
    const r = this.readers.get(convId);
    if (!c || !r) return;
    if (c.type === 'direct') {
      for (const [u, s] of r) {
        if (u === this.me) continue;
        if (!c.peer_id) c.peer_id = u;
        if (u === c.peer_id) {
          c.peer_read_seq = max(c.peer_read_seq, s);
          c.peer_delivered_seq = max(c.peer_delivered_seq, c.peer_read_seq);
        }
      }
    }
  }

  _queueDelivered(c) {
    const last = c.last_message;
    if (c.max_seq > (c.delivered_seq ?? 0) && !(last && last.seq === c.max_seq && last.sender_id === this.me)) {
      this.effects.push({ type: 'delivered', conv_id: c.conv_id, seq: c.max_seq });
    }
  }

  _resolveOutbox(m) {
    const i = this.outbox.findIndex((p) => p.client_msg_id === m.client_msg_id && p.conv_id === m.conv_id);
    if (i >= 0) this.outbox.splice(i, 1);
  }

  _resolveOutboxFromMessages() {
    if (!this.outbox.length) return;
    for (const p of [...this.outbox]) {
      const m = (this.msgs.get(p.conv_id) ?? []).find((x) => x.client_msg_id === p.client_msg_id && x.sender_id === this.me);
      if (m) this._resolveOutbox(m);
    }
  }
}

/** Where the run of list[i] starts: the index of the lowest message with no hole up to it. */
function runStart(list, i) {
  while (i > 0 && list[i - 1].seq === list[i].seq - 1) i--;
  return Math.max(i, 0);
}

/** The tail of a list ascending by seq that has no hole in its seqs. */
function newestRun(list) {
  const i = runStart(list, list.length - 1);
  return i > 0 ? list.slice(i) : list;
}

function pickLast(a, b, clearedSeq = 0) {
  const ok = (m) => m && m.seq > (clearedSeq ?? 0);
  if (!ok(b)) return ok(a) ? a : null;
  if (!ok(a) || b.seq > a.seq) return { ...b };
  if (b.seq === a.seq) return mergeMessage(a, b);
  return a;
}
