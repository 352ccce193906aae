// Parley web client: the page. All protocol work is in ./sdk/parley.js; this file renders the
// SDK's state and turns user input into SDK calls. Plain DOM, no framework, no build step.
//
// Test and debugging switches (query string): ?transport=longpoll|websocket|auto and
// ?backoff=<base ms>,<max ms>. The session (user, device, token) lives in sessionStorage, so
// each tab can be a different device; the synced state lives in localStorage (see the SDK).

import { ParleyClient, MAX_PRESENCE_SUBSCRIPTIONS, MsgState, ContentType, messageText, attachmentOf, attachmentLabel, formatBytes } from './sdk/parley.js';
import { WebPushSetup } from './push.js';

const $ = (id) => document.getElementById(id);
const SESSION_KEY = 'parley.session';
const STATE_NAMES = { [MsgState.FAILED]: 'failed', [MsgState.SENDING]: 'sending', [MsgState.SENT]: 'sent', [MsgState.DELIVERED]: 'delivered', [MsgState.READ]: 'read', [MsgState.RECALLED]: 'recalled' };
const TICKS = { sending: '◷', sent: '✓', delivered: '✓✓', read: '✓✓' };
const TICK_LABELS = { sending: 'Sending', sent: 'Sent', delivered: 'Delivered', read: 'Read' };
const PUSH_LABELS = {
  off: ['Enable notifications', 'Get a notification for new messages while Parley is closed'],
  on: ['Notifications on', 'Notifications are on for this device: click to turn them off'],
  denied: ['Notifications blocked', 'This browser blocks notifications from this site: allow them in the site settings'],
  busy: ['Notifications…', ''],
};

const params = new URLSearchParams(location.search);
const clientOptions = {
  transport: ['websocket', 'longpoll', 'auto'].includes(params.get('transport')) ? params.get('transport') : 'auto',
};
if (params.get('backoff')) {
  const [base, max] = params.get('backoff').split(',').map(Number);
  if (base > 0 && max >= base) clientOptions.backoff = { base, max };
}

let client = null;
let session = null;
let pushSetup = null; // this device's Web Push (push.js), while signed in
let presenceFollowed = ''; // the direct chats' peers subscribed to, joined by commas
let openConv = null;
let openedAt = null; // conv_id the chat view was last set up for
let renderQueued = false;
let focusComposer = false; // the user opened a chat from the list: type right away
// A jump to a date in the open chat: {convId, scrollTo} while the page jumped to is below a
// hole in the loaded messages (the chat shows it and the messages up to the hole; "Load
// later messages" fills the hole); scrollTo is the seq to bring into view once rendered.
let jump = null;
const drafts = new Map(); // conv_id -> unsent text in the message box
const uploads = new Map(); // key -> {key, convId, name, sent, total, state, error, ctrl}: uploads in progress, failed or just done
let uploadSeq = 0;
const DONE_LINGERS = 3000; // ms a finished upload's bar stays before it goes
const THUMB_BOX = 280; // px: the longest side an image message is laid out at

boot();

function boot() {
  bindLogin();
  bindApp();
  session = readSession();
  if (session) startApp(session);
  else showLogin();
}

// ---- session and sign-in ----

function readSession() {
  try {
    const s = JSON.parse(sessionStorage.getItem(SESSION_KEY) ?? 'null');
    return s && s.token && s.userId ? s : null;
  } catch {
    return null;
  }
}

async function showLogin(message = '') {
  $('app').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = message;
  let dev = false;
  try {
    const r = await fetch('/v1/dev/login', { cache: 'no-store' });
    dev = r.ok;
  } catch { /* offline: token sign-in only */ }
  $('dev-form').hidden = !dev;
  $('token-title').textContent = dev ? 'Or sign in with a token' : 'Sign in with a token';
  (dev ? $('dev-user') : $('tok-user')).focus();
}

function bindLogin() {
  $('dev-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const user = $('dev-user').value.trim();
    const device = $('dev-device').value.trim();
    setLoginError('');
    try {
      const r = await fetch('/v1/dev/login', {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ user_id: user, device_id: device }),
      });
      const body = await r.json().catch(() => ({}));
      if (!r.ok) throw new Error(body.error ?? `HTTP ${r.status}`);
      signIn({ userId: body.user_id, deviceId: body.device_id, token: body.token });
    } catch (err) {
      setLoginError(`Sign-in failed: ${err.message}`);
    }
  });
  $('token-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const userId = $('tok-user').value.trim();
    const token = $('tok-token').value.trim();
    setLoginError('');
    try {
      const r = await fetch('/v1/sync/snapshot?recent=0', { headers: { Authorization: `Bearer ${token}` }, cache: 'no-store' });
      if (!r.ok) throw new Error((await r.json().catch(() => ({}))).error ?? `HTTP ${r.status}`);
      signIn({ userId, deviceId: '', token });
    } catch (err) {
      setLoginError(`Sign-in failed: ${err.message}`);
    }
  });
}

function setLoginError(text) {
  $('login-error').textContent = text;
}

function signIn(s) {
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));
  $('tok-token').value = '';
  startApp(s);
}

async function signOut(message = '') {
  const c = client;
  client = null;
  window.parleyClient = null;
  sessionStorage.removeItem(SESSION_KEY);
  const p = pushSetup;
  pushSetup = null;
  renderPush('unavailable');
  if (p) await p.disable().catch(() => { /* best effort: the server forgets the device's target anyway when the token ends */ });
  if (c) await c.forget();
  openConv = null;
  openedAt = null;
  presenceFollowed = '';
  $('presence-hidden').checked = false;
  $('presence-hidden').disabled = true;
  $('conv-list').replaceChildren();
  $('messages').replaceChildren();
  history.replaceState(null, '', location.pathname + location.search);
  showLogin(message);
}

function storageKey(s) {
  if (s.deviceId) return `parley:${s.userId}:${s.deviceId}`;
  let h = 2166136261; // FNV-1a of the token: one saved state per token
  for (let i = 0; i < s.token.length; i++) h = Math.imul(h ^ s.token.charCodeAt(i), 16777619);
  return `parley:${s.userId}:t${(h >>> 0).toString(36)}`;
}

async function startApp(s) {
  session = s;
  $('login').hidden = true;
  $('app').hidden = false;
  $('me').textContent = s.deviceId ? `${s.userId} · ${s.deviceId}` : s.userId;
  $('app').dataset.user = s.userId;
  client = new ParleyClient({ token: s.token, userId: s.userId, storageKey: storageKey(s), ...clientOptions });
  window.parleyClient = client; // for debugging and the browser tests
  client.addEventListener('change', scheduleRender);
  client.addEventListener('status', renderStatus);
  client.addEventListener('presence', scheduleRender);
  client.addEventListener('autherror', () => signOut('Your session ended: the server refused the token. Sign in again.'));
  client.addEventListener('replaced', () => showNotice('This device connected from another tab or window, so this one stopped.'));
  renderStatus();
  pushSetup = new WebPushSetup({ token: s.token, key: storageKey(s) });
  initPush(pushSetup);
  await client.start();
  route();
  initPresence(client);
}

// ---- presence: the list's online dots, "Appear offline", away while the page is hidden ----

/** Reads the stored "Appear offline" setting, and says away if the page starts hidden. */
async function initPresence(c) {
  const box = $('presence-hidden');
  if (document.hidden) c.setAway(true).catch(() => {});
  try {
    const me = await c.me();
    if (c !== client) return;
    box.checked = me.presence === 'hidden';
    box.disabled = false;
  } catch { /* the box stays disabled: the next sign-in tries again */ }
}

async function togglePresenceHidden() {
  const box = $('presence-hidden');
  const hidden = box.checked;
  box.disabled = true;
  try {
    const me = await client.setPresenceHidden(hidden);
    box.checked = me.presence === 'hidden';
  } catch (e) {
    box.checked = !hidden;
    showNotice(`Could not ${hidden ? 'hide' : 'show'} your presence: ${e.message}`, false);
  } finally {
    box.disabled = false;
  }
}

/**
 * Follows the presence of the direct chats' peers (the first 500 of the list), subscribing
 * again only when they change: a new peer is checked by the server at its subscription.
 */
function followPresence(convs) {
  const peers = [...new Set(convs.filter((c) => c.type === 'direct').map((c) => client.peerOf(c.conv_id)).filter(Boolean))]
    .slice(0, MAX_PRESENCE_SUBSCRIPTIONS);
  const key = peers.join(',');
  if (key === presenceFollowed) return;
  presenceFollowed = key;
  client.subscribePresence(peers, { replace: true }).catch(() => { presenceFollowed = ''; }); // the next render tries again
}

/** The dot of a direct chat: "online", "away", or "" (offline, unknown, or a group). */
function presenceOf(c) {
  const st = c.type === 'direct' ? client.presence(client.peerOf(c.conv_id))?.state : '';
  return st === 'online' || st === 'away' ? st : '';
}

// ---- Web Push: the "Enable notifications" button ----

/** Shows the button once the state is known, and re-registers a subscription that is on. */
async function initPush(p) {
  let st;
  try {
    st = await p.refresh();
  } catch {
    st = 'off';
  }
  if (p === pushSetup) renderPush(st);
}

function renderPush(state) {
  const b = $('push-toggle');
  b.hidden = !PUSH_LABELS[state]; // unsupported by the browser, or off on the server
  if (b.hidden) return;
  b.dataset.state = state;
  b.disabled = state === 'denied' || state === 'busy';
  b.setAttribute('aria-pressed', String(state === 'on'));
  [b.textContent, b.title] = PUSH_LABELS[state];
}

/** The button's click: the permission prompt needs this user gesture, so enable() is called at once. */
async function togglePush() {
  const p = pushSetup;
  if (!p) return;
  const on = $('push-toggle').dataset.state === 'on';
  const pending = on ? p.disable().then(() => 'off') : p.enable();
  renderPush('busy');
  try {
    const st = await pending;
    if (p === pushSetup) renderPush(st);
  } catch (e) {
    if (p === pushSetup) renderPush(on ? 'on' : 'off');
    showNotice(`Could not turn notifications ${on ? 'off' : 'on'}: ${e.message}`, false);
  }
}

// ---- routing: #c=<conv_id> is the open conversation ----

function route() {
  const m = /^#c=(.+)$/.exec(location.hash);
  openConv = m ? decodeURIComponent(m[1]) : null;
  render();
}

function openConversation(convId) {
  const hash = `#c=${encodeURIComponent(convId)}`;
  if (location.hash === hash) route();
  else location.hash = hash;
}

function closeConversation() {
  const was = openConv;
  history.pushState(null, '', location.pathname + location.search);
  route();
  document.querySelector(`#conv-list button[data-conv="${CSS.escape(was ?? '')}"]`)?.focus();
}

// ---- rendering ----

function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  setTimeout(() => {
    renderQueued = false;
    render();
  }, 0);
}

function render() {
  if (!client) return;
  renderList();
  renderChat();
  markVisibleRead();
}

function renderStatus() {
  const el = $('status');
  const status = client?.status ?? 'offline';
  const lp = client?.mode === 'longpoll';
  el.dataset.status = status;
  el.dataset.transport = client?.mode ?? '';
  el.textContent = status === 'online' ? (lp ? 'Online (long-poll)' : 'Online') : status === 'connecting' ? 'Connecting…' : 'Offline, retrying';
}

/** Shows a notice; reconnect offers the button that starts the client again. */
function showNotice(text, reconnect = true) {
  $('notice-text').textContent = text;
  $('notice-action').hidden = !reconnect;
  $('notice').hidden = false;
}

function convTitle(c) {
  if (c.type === 'direct') return client.peerOf(c.conv_id) || 'Direct chat';
  return c.name || 'Unnamed group';
}

function preview(c) {
  const m = c.last_message;
  if (!m) return 'No messages yet';
  const who = m.sender_id === session.userId ? 'You: ' : c.type === 'group' ? `${m.sender_id}: ` : '';
  if (m.recalled) return `${who}Message recalled`;
  const label = attachmentLabel(m);
  const text = messageText(m);
  return who + (label ? `${label}${text ? `: ${text}` : ''}` : text);
}

/** Reconciles a parent's children with `items` ({key, sig, build(el), tag}) in order. */
function reconcile(parent, items) {
  const active = document.activeElement;
  const activeKey = parent.contains(active) ? active.closest('[data-key]')?.dataset.key : null;
  const existing = new Map();
  for (const el of parent.children) existing.set(el.dataset.key, el);
  let prev = null;
  for (const it of items) {
    let el = existing.get(it.key);
    existing.delete(it.key);
    if (!el || el.tagName !== it.tag.toUpperCase()) {
      el?.remove();
      el = document.createElement(it.tag);
      el.dataset.key = it.key;
    }
    if (el.dataset.sig !== it.sig) {
      it.build(el); // updates el in place where it can, so a click or the focus is not lost
      el.dataset.sig = it.sig;
    }
    const want = prev ? prev.nextSibling : parent.firstChild;
    if (want !== el) parent.insertBefore(el, want);
    prev = el;
  }
  for (const el of existing.values()) el.remove();
  if (activeKey && !parent.contains(document.activeElement)) {
    // The focused element was rebuilt: keep the focus on the same item.
    const host = parent.querySelector(`[data-key="${CSS.escape(activeKey)}"]`);
    (host?.querySelector('button') ?? host)?.focus();
  }
}

function renderList() {
  const convs = client.conversations();
  $('conv-empty').hidden = convs.length > 0;
  followPresence(convs);
  const items = convs.map((c) => {
    const unread = client.unread(c.conv_id);
    const title = convTitle(c);
    const last = c.last_message;
    const time = last ? shortTime(last.created_at) : '';
    const text = preview(c);
    const current = c.conv_id === openConv;
    const presence = presenceOf(c);
    return {
      key: c.conv_id, tag: 'li',
      sig: JSON.stringify([title, text, time, unread, current, c.type, presence]),
      build(li) {
        let b = li.querySelector('button.conv');
        if (!b) b = li.appendChild(el('button', { type: 'button', 'data-conv': c.conv_id }));
        b.className = unread ? 'conv unread' : 'conv';
        b.dataset.unread = String(unread);
        if (current) b.setAttribute('aria-current', 'true');
        else b.removeAttribute('aria-current');
        const label = `${title}${c.type === 'group' ? ' (group)' : ''}${presence ? `, ${presence}` : ''}. ${unread ? `${unread} unread. ` : ''}${text}${time ? `, ${time}` : ''}`;
        b.setAttribute('aria-label', label);
        const face = avatar(title);
        if (presence) face.append(el('span', { class: 'presence-dot', 'data-presence': presence }));
        b.replaceChildren(
          face,
          el('span', { class: 'conv-main' }, el('span', { class: 'conv-title' }, title), el('span', { class: 'conv-last' }, text)),
          el('span', { class: 'conv-meta' }, el('span', { class: 'conv-time' }, time),
            unread ? el('span', { class: 'badge', 'aria-hidden': 'true' }, unread > 99 ? '99+' : String(unread)) : ''),
        );
      },
    };
  });
  reconcile($('conv-list'), items);
}

function renderChat() {
  const c = openConv ? client.conversation(openConv) : null;
  document.body.classList.toggle('chat-open', !!c);
  $('chat-view').hidden = !c;
  $('chat-empty').hidden = !!c;
  if (!c) {
    if (openedAt) client.closeConversation(openedAt);
    openedAt = null;
    return;
  }
  const first = openedAt !== c.conv_id;
  if (first) {
    // The conversation on screen is open on the socket: a large group's messages are then
    // pushed as they come instead of being announced by notices.
    if (openedAt) client.closeConversation(openedAt);
    client.openConversation(c.conv_id);
    openedAt = c.conv_id;
    $('chat-error').textContent = '';
    $('messages').replaceChildren();
    jump = null;
    $('jump-date').value = '';
    $('jump-note').textContent = '';
    $('composer-input').value = drafts.get(c.conv_id) ?? '';
    autosize();
    onOpen(c.conv_id);
  }
  $('chat-title').textContent = convTitle(c);
  $('typing').textContent = typingText(client.typing(c.conv_id));
  const members = client.members(c.conv_id);
  $('chat-sub').textContent = c.type === 'direct' ? 'Direct chat'
    : `${c.members_count} member${c.members_count === 1 ? '' : 's'}${members.length && members.length <= 8 ? `: ${members.join(', ')}` : ''}`;
  $('chat-view').dataset.conv = c.conv_id;
  $('chat-view').dataset.type = c.type;

  const scroller = $('scroller');
  const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 48;
  // After a jump to a date: the page jumped to and what was loaded next to it, up to the
  // hole below the newest messages; sends still pending belong after those, so not here.
  const jumped = jump?.convId === c.conv_id ? jump : null;
  const gap = jumped ? client.firstGap(c.conv_id) : null;
  let msgs = client.messages(c.conv_id);
  if (gap) msgs = msgs.filter((m) => !m.pending && m.seq < gap[0]);
  const items = [];
  let day = '';
  for (const m of msgs) {
    const d = dayKey(m.created_at);
    if (d !== day) {
      day = d;
      const label = dayLabel(m.created_at);
      items.push({ key: `d:${d}`, tag: 'li', sig: label, build(li) { li.replaceChildren(); li.className = 'day'; li.setAttribute('role', 'separator'); li.setAttribute('aria-label', label); li.append(el('span', {}, label)); } });
    }
    items.push(messageItem(c, m));
  }
  reconcile($('messages'), items);
  renderUploads();
  $('load-older').hidden = !client.hasOlder(c.conv_id);
  $('later').hidden = !gap;
  const lastMine = msgs.length && msgs[msgs.length - 1].sender_id === session.userId;
  if (jumped) {
    // No following the bottom while jumped, nor in the render that filled the hole: the
    // page just loaded stays where it is. Live behaviour from the next render on.
    if (jumped.scrollTo) showAnchor(jumped.scrollTo);
    jumped.scrollTo = 0;
    if (!gap) jump = null;
  } else if (first || atBottom || lastMine) scroller.scrollTop = scroller.scrollHeight;
  if (first && focusComposer) $('composer-input').focus();
  focusComposer = false;
}

/** Brings the message seq into view and highlights it for a moment. */
function showAnchor(seq) {
  const li = $('messages').querySelector(`li.msg[data-seq="${seq}"]`);
  if (!li) return;
  $('messages').dataset.anchor = String(seq); // for the browser tests
  li.scrollIntoView({ block: 'center' });
  li.classList.remove('anchor');
  void li.offsetWidth; // restart the animation when the same message is the anchor again
  li.classList.add('anchor');
  li.addEventListener('animationend', () => li.classList.remove('anchor'), { once: true });
}

/** Jumps the open chat to a day of the date picker ("YYYY-MM-DD"): from its local midnight. */
async function jumpToDate(value) {
  const d = /^(\d{4})-(\d{2})-(\d{2})$/.exec(value);
  const convId = openConv;
  if (!d || !convId) return;
  const day = new Date(Number(d[1]), Number(d[2]) - 1, Number(d[3]));
  $('chat-error').textContent = '';
  $('jump-note').textContent = '';
  try {
    const page = await client.messagesAround(convId, day, 50);
    if (openConv !== convId) return;
    const latest = page.messages.length ? page.messages[page.messages.length - 1].seq : 0;
    jump = { convId, scrollTo: page.anchor_seq || latest };
    if (!page.anchor_seq) {
      const label = day.toLocaleDateString(undefined, { day: 'numeric', month: 'long', year: 'numeric' });
      $('jump-note').textContent = page.messages.length ? `No messages from ${label} on: these are the latest.` : 'No messages yet.';
    }
    render();
  } catch (e) {
    $('chat-error').textContent = `Could not jump to that date: ${e.message}`;
  }
}

/** Leaves a jump for the newest messages (the composer's send does too). */
function backToLatest() {
  if (!jump || !openConv) return;
  jump = null;
  $('jump-note').textContent = '';
  client.backToNewest(openConv);
  render();
  $('scroller').scrollTop = $('scroller').scrollHeight;
}

function messageItem(c, m) {
  const mine = m.sender_id === session.userId;
  const state = STATE_NAMES[client.msgState(m)];
  const text = messageText(m);
  const att = attachmentOf(m);
  const r = mine && !m.pending && c.type === 'group' ? client.receipts(c.conv_id, m.seq) : null;
  const readBy = r ? `Read by ${r.read_count} of ${r.member_count}` : '';
  const key = m.pending ? `p:${m.client_msg_id}` : `m:${m.seq}`;
  return {
    key, tag: 'li',
    sig: JSON.stringify([state, text, readBy, m.error ?? '', c.type, att ? [att.attachment_id, att.name, !!att.attachment] : 0]),
    build(li) {
      li.replaceChildren();
      li.className = `msg ${mine ? 'mine' : 'theirs'}${m.recalled ? ' recalled' : ''}${m.pending ? ' pending' : ''}`;
      li.dataset.seq = String(m.seq);
      li.dataset.cmid = m.client_msg_id;
      li.dataset.state = state;
      li.dataset.sender = m.sender_id;
      if (readBy) li.dataset.readby = `${r.read_count}/${r.member_count}`;
      const bubble = el('div', { class: 'bubble' });
      if (!mine && c.type === 'group') bubble.append(el('span', { class: 'sender', color: userColor(m.sender_id) }, m.sender_id));
      if (att) {
        bubble.classList.add('has-attachment');
        bubble.append(attachmentView(m, att));
      }
      bubble.append(m.recalled ? el('p', { class: 'text' }, el('em', {}, mine ? 'You recalled this message' : 'This message was recalled'))
        : el('p', { class: 'text' }, att ? text : text || '(empty message)'));
      const meta = el('span', { class: 'meta' }, el('time', { datetime: new Date(m.created_at).toISOString() }, clock(m.created_at)));
      // Ticks: every state in direct chats; in groups only "sending" (receipts say the rest).
      if (mine && TICKS[state] && (c.type === 'direct' || m.pending)) {
        meta.append(el('span', { class: `ticks ${state}`, role: 'img', 'aria-label': TICK_LABELS[state] }, TICKS[state]));
      }
      if (readBy && !m.recalled) meta.append(el('span', { class: 'readby' }, readBy));
      bubble.append(meta);
      li.append(bubble);
      if (m.failed) {
        li.append(el('div', { class: 'msg-actions' },
          el('span', { class: 'error' }, `Not sent: ${m.error}`),
          button('Retry', () => client.retrySend(m.client_msg_id)),
          button('Discard', () => client.discardSend(m.client_msg_id))));
      } else if (mine && !m.pending && !m.recalled) {
        const b = button('Recall', () => recall(c.conv_id, m.seq), 'recall');
        b.setAttribute('aria-label', `Recall your message: ${(text || attachmentLabel(m)).slice(0, 60)}`);
        li.append(el('div', { class: 'msg-actions' }, b));
      }
    },
  };
}

// ---- attachments ----

/** A message's attachment: an image laid out at once from its metadata, or a file card. */
function attachmentView(m, att) {
  const meta = att.attachment ?? {};
  if (m.content_type === ContentType.IMAGE && meta.width > 0 && meta.height > 0) return imageView(att, meta);
  return fileCard(m, att, meta);
}

/** Fits w x h into a box of side max, keeping the ratio. */
function fit(w, h, max) {
  const k = Math.min(1, max / Math.max(w, h));
  return { w: Math.max(1, Math.round(w * k)), h: Math.max(1, Math.round(h * k)) };
}

/**
 * An image message: its final size from width/height, the server's tiny preview (a data:
 * URL in the message) at once, then the thumbnail through a signed URL, faded in once
 * loaded. A click opens the full image in the viewer.
 */
function imageView(att, meta) {
  const { w, h } = fit(meta.width, meta.height, THUMB_BOX);
  const name = att.name || 'Image';
  const box = el('button', { type: 'button', class: 'att-image', 'data-att': att.attachment_id, 'aria-label': `Open image ${name}, ${meta.width} by ${meta.height}` });
  box.style.width = `${w}px`;
  box.style.height = `${h}px`;
  if (meta.preview?.startsWith('data:image/')) box.append(el('img', { class: 'att-preview', src: meta.preview, alt: '', width: w, height: h }));
  const thumb = el('img', { class: 'att-thumb', alt: name, width: w, height: h, decoding: 'async' });
  thumb.addEventListener('load', () => thumb.classList.add('loaded'), { once: true });
  box.append(thumb);
  signedURLs(att.attachment_id).then((u) => { if (u) thumb.src = (meta.thumbnail && u.thumbnail) || u.content; });
  box.addEventListener('click', () => openViewer(att, name));
  return box;
}

/** Any other attachment: a card with its name, size and a download link (audio and video also play). */
function fileCard(m, att, meta) {
  const name = att.name || attachmentLabel(m) || 'File';
  const type = meta.mime_type ? meta.mime_type.split(';')[0] : '';
  const ext = /\.([A-Za-z0-9]{1,4})$/.exec(name)?.[1] ?? { [ContentType.AUDIO]: 'AUD', [ContentType.VIDEO]: 'VID' }[m.content_type] ?? 'FILE';
  const icon = ext.toUpperCase();
  const link = el('a', { class: 'att-download', download: name, 'aria-label': `Download ${name}`, 'aria-disabled': 'true' }, 'Download');
  const card = el('div', { class: 'att-file', 'data-att': att.attachment_id },
    el('span', { class: 'att-icon', 'aria-hidden': 'true' }, icon),
    el('span', { class: 'att-info' }, el('span', { class: 'att-name', title: name }, name),
      el('span', { class: 'att-size' }, [formatBytes(meta.size), type].filter(Boolean).join(' · '))),
    link);
  const media = m.content_type === ContentType.AUDIO ? el('audio', { controls: '', preload: 'none' })
    : m.content_type === ContentType.VIDEO ? el('video', { controls: '', preload: 'metadata' }) : null;
  if (media) card.append(media);
  signedURLs(att.attachment_id).then((u) => {
    if (!u) return;
    link.href = u.content;
    link.removeAttribute('aria-disabled');
    if (media) media.src = u.content;
  });
  return card;
}

/** Signed URLs of an attachment (cached by the SDK), or null when they cannot be had now. */
function signedURLs(id) {
  return client.attachmentURLs(id).catch(() => null);
}

async function openViewer(att, name) {
  const u = await signedURLs(att.attachment_id);
  if (!u) {
    $('chat-error').textContent = 'Could not open the image: try again when online.';
    return;
  }
  $('viewer-name').textContent = name;
  $('viewer-img').alt = name;
  $('viewer-img').src = u.content;
  $('viewer-open').href = u.content;
  $('viewer').showModal();
}

/** Uploads files to the open conversation and sends each as a message once it is up. */
function attachFiles(files) {
  if (!openConv) return;
  for (const f of files) startUpload(openConv, f);
}

async function startUpload(convId, file) {
  const u = { key: `u${++uploadSeq}`, convId, name: file.name || 'Pasted image', sent: 0, total: file.size, state: 'uploading', error: '', ctrl: new AbortController() };
  uploads.set(u.key, u);
  renderUploads();
  try {
    const att = await client.upload(file, {
      signal: u.ctrl.signal,
      onProgress: (sent, total) => { u.sent = sent; u.total = total; renderUploads(); },
    });
    client.sendAttachment(convId, att, { name: file.name || '' });
    u.sent = u.total;
    u.state = 'done';
    setTimeout(() => { uploads.delete(u.key); renderUploads(); }, DONE_LINGERS);
  } catch (e) {
    if (e.name === 'AbortError') uploads.delete(u.key);
    else {
      u.state = 'failed';
      u.error = e.message;
    }
  }
  renderUploads();
}

/** The open conversation's uploads: a progress bar each, cancel while running, dismiss once failed. */
function renderUploads() {
  const list = $('uploads');
  const mine = [...uploads.values()].filter((u) => u.convId === openConv);
  list.hidden = mine.length === 0;
  reconcile(list, mine.map((u) => {
    const pct = u.total ? Math.floor((u.sent / u.total) * 100) : 0;
    return {
      key: u.key, tag: 'li',
      sig: JSON.stringify([u.state, pct, u.error]),
      build(li) {
        li.className = 'upload';
        li.dataset.state = u.state;
        const status = u.state === 'failed' ? `Failed: ${u.error}` : u.state === 'done' ? 'Sent' : `${pct}%`;
        const bar = el('progress', { max: String(u.total || 1), value: String(u.state === 'done' ? u.total || 1 : u.sent), 'aria-label': `Uploading ${u.name}` });
        const action = u.state === 'uploading' ? button('Cancel', () => u.ctrl.abort())
          : u.state === 'failed' ? button('Dismiss', () => { uploads.delete(u.key); renderUploads(); }) : el('span');
        li.replaceChildren(el('span', { class: 'upload-name', title: u.name }, `${u.name} · ${status}`), bar, action);
      },
    };
  }));
}

async function recall(convId, seq) {
  $('chat-error').textContent = '';
  try {
    await client.recall(convId, seq);
    $('composer-input').focus();
  } catch (e) {
    $('chat-error').textContent = `Could not recall the message: ${e.message}`;
  }
}

async function onOpen(convId) {
  // The member list from read positions is incomplete on a device that saw the group
  // created: ask the server.
  if (client.conversation(convId)?.type === 'group') client.loadMembers(convId).catch(() => { /* cosmetic */ });
  try {
    await client.fillGaps(convId);
    if (client.messages(convId).length < 20 && client.hasOlder(convId)) await client.loadOlder(convId);
  } catch { /* offline: what we have is shown */ }
  refreshReceipts();
}

function markVisibleRead() {
  if (openConv && document.visibilityState === 'visible' && !$('chat-view').hidden) client.markRead(openConv);
}

/**
 * Group receipts are pushed to their sender as they change (the SDK keeps them), so a group
 * needs one fetch when it is opened, for the counts of messages sent before this session.
 */
function refreshReceipts() {
  const c = openConv && client ? client.conversation(openConv) : null;
  if (!c || c.type !== 'group') return;
  const seqs = client.messages(c.conv_id)
    .filter((m) => m.sender_id === session.userId && !m.pending && !m.recalled)
    .map((m) => m.seq)
    .filter((seq) => !client.receipts(c.conv_id, seq))
    .slice(-5);
  if (seqs.length) client.refreshReceipts(c.conv_id, seqs);
}

// ---- input ----

function bindApp() {
  window.addEventListener('hashchange', route);
  window.addEventListener('popstate', route);
  document.addEventListener('visibilitychange', render);
  // Presence (protocol 9.11): a hidden page says this device is away; the user shows away
  // once every device of theirs is.
  document.addEventListener('visibilitychange', () => client?.setAway(document.hidden).catch(() => {}));
  $('presence-hidden').addEventListener('change', togglePresenceHidden);
  $('signout').addEventListener('click', () => signOut());
  $('push-toggle').addEventListener('click', togglePush);
  // A click on a notification (sw.js) asks an open page to show that conversation.
  navigator.serviceWorker?.addEventListener('message', (e) => {
    if (e.data?.type === 'open' && typeof e.data.conv_id === 'string' && client) openConversation(e.data.conv_id);
  });
  navigator.serviceWorker?.startMessages?.();
  $('notice-action').addEventListener('click', () => {
    $('notice').hidden = true;
    client?.start();
  });
  $('back').addEventListener('click', closeConversation);
  $('load-older').addEventListener('click', async () => {
    try {
      await client.loadOlder(openConv);
    } catch (e) {
      $('chat-error').textContent = `Could not load messages: ${e.message}`;
    }
  });

  $('load-newer').addEventListener('click', async () => {
    try {
      await client.loadNewer(openConv);
    } catch (e) {
      $('chat-error').textContent = `Could not load messages: ${e.message}`;
    }
  });
  $('to-latest').addEventListener('click', backToLatest);
  $('jump-date').addEventListener('change', (e) => jumpToDate(e.target.value));

  const list = $('conv-list');
  list.addEventListener('click', (e) => {
    const b = e.target.closest('button.conv');
    if (b) {
      focusComposer = true;
      openConversation(b.dataset.conv);
    }
  });
  list.addEventListener('keydown', (e) => {
    const buttons = [...list.querySelectorAll('button.conv')];
    const i = buttons.indexOf(document.activeElement);
    if (i < 0) return;
    const to = { ArrowDown: i + 1, ArrowUp: i - 1, Home: 0, End: buttons.length - 1 }[e.key];
    if (to === undefined) return;
    e.preventDefault();
    buttons[Math.max(0, Math.min(buttons.length - 1, to))].focus();
  });

  $('chat-view').addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && !e.defaultPrevented) {
      e.preventDefault();
      closeConversation();
    }
  });

  const input = $('composer-input');
  let swallowBreak = false;
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      swallowBreak = true;
      $('composer').requestSubmit();
    }
  });
  input.addEventListener('keyup', () => { swallowBreak = false; });
  input.addEventListener('beforeinput', (e) => {
    if (swallowBreak && (e.inputType === 'insertLineBreak' || e.inputType === 'insertParagraph')) e.preventDefault();
  });
  input.addEventListener('input', () => {
    if (openConv) drafts.set(openConv, input.value);
    // Typing (protocol 9.10): the SDK throttles to one "started" per 3 s and stops it on
    // send or after 5 s idle; clearing the draft stops it at once.
    if (openConv) input.value ? client.keystroke(openConv) : client.stopTyping(openConv);
    autosize();
  });
  // Attachments: the paperclip's file input, pasted images, files dropped on the chat.
  $('attach').addEventListener('click', () => $('attach-input').click());
  $('attach-input').addEventListener('change', (e) => {
    attachFiles([...e.target.files]);
    e.target.value = ''; // the same file can be picked again
  });
  input.addEventListener('paste', (e) => {
    const files = [...(e.clipboardData?.files ?? [])].filter((f) => f.type.startsWith('image/'));
    if (!files.length) return;
    e.preventDefault();
    attachFiles(files);
  });
  const view = $('chat-view');
  const hasFiles = (e) => [...(e.dataTransfer?.types ?? [])].includes('Files');
  view.addEventListener('dragover', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = 'copy';
    view.classList.add('dropping');
  });
  view.addEventListener('dragleave', (e) => { if (!view.contains(e.relatedTarget)) view.classList.remove('dropping'); });
  view.addEventListener('drop', (e) => {
    view.classList.remove('dropping');
    if (!hasFiles(e)) return;
    e.preventDefault();
    attachFiles([...e.dataTransfer.files]);
  });
  $('viewer').addEventListener('click', (e) => { if (e.target === $('viewer')) $('viewer').close(); }); // the backdrop
  $('viewer').addEventListener('close', () => $('viewer-img').removeAttribute('src'));

  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = input.value.trim();
    if (!text || !openConv) return;
    backToLatest(); // a message sent goes below the newest ones: show them
    client.send(openConv, text);
    drafts.delete(openConv);
    input.value = '';
    autosize();
    input.focus();
  });

  bindNewChat();
}

/** "bob is typing…", "bob and carol are typing…", "Several people are typing…", or "". */
function typingText({ users, count }) {
  if (count === 0) return '';
  if (count > users.length || count > 3) return 'Several people are typing…';
  if (users.length === 1) return `${users[0]} is typing…`;
  return `${users.slice(0, -1).join(', ')} and ${users[users.length - 1]} are typing…`;
}

function autosize() {
  const input = $('composer-input');
  input.style.height = 'auto';
  input.style.height = `${Math.min(input.scrollHeight, 160)}px`;
}

function bindNewChat() {
  const dialog = $('new-dialog');
  const kind = () => dialog.querySelector('input[name=kind]:checked').value;
  const sync = () => {
    const group = kind() === 'group';
    $('direct-fields').hidden = group;
    $('group-fields').hidden = !group;
  };
  $('new-chat').addEventListener('click', () => {
    $('new-form').reset();
    $('new-error').textContent = '';
    sync();
    dialog.showModal();
    $('new-peer').focus();
  });
  for (const r of dialog.querySelectorAll('input[name=kind]')) r.addEventListener('change', sync);
  $('new-cancel').addEventListener('click', () => dialog.close());
  $('new-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    $('new-error').textContent = '';
    try {
      let c;
      if (kind() === 'direct') {
        const peer = $('new-peer').value.trim();
        if (!peer) throw new Error('enter the user id of the person to chat with');
        c = await client.createDirect(peer);
      } else {
        const name = $('new-group-name').value.trim();
        const members = $('new-members').value.split(/[\s,]+/).filter(Boolean);
        c = await client.createGroup(name, members);
      }
      dialog.close();
      openConversation(c.conv_id);
      $('composer-input').focus();
    } catch (err) {
      $('new-error').textContent = err.code === 404 ? `No such user: ${err.message.replace(/^not found: user /, '')}` : `Could not start it: ${err.message}`;
    }
  });
}

// ---- small DOM and time helpers ----

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'color' || k === 'background') e.style[k] = v; // CSSOM: allowed by the CSP
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== '' && c != null) e.append(c);
  return e;
}

function button(label, onClick, cls = 'ghost small') {
  const b = el('button', { type: 'button', class: cls }, label);
  b.addEventListener('click', onClick);
  return b;
}

function avatar(name) {
  return el('span', { class: 'avatar', 'aria-hidden': 'true', background: userColor(name) }, (name[0] ?? '?').toUpperCase());
}

function userColor(name) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return `hsl(${h % 360} 55% 42%)`;
}

function dayKey(ms) {
  const d = new Date(ms);
  return `${d.getFullYear()}-${d.getMonth() + 1}-${d.getDate()}`;
}

function dayLabel(ms) {
  const d = new Date(ms);
  const today = new Date();
  const yesterday = new Date(today.getFullYear(), today.getMonth(), today.getDate() - 1);
  if (dayKey(ms) === dayKey(today.getTime())) return 'Today';
  if (dayKey(ms) === dayKey(yesterday.getTime())) return 'Yesterday';
  return d.toLocaleDateString(undefined, { weekday: 'long', day: 'numeric', month: 'long', year: d.getFullYear() === today.getFullYear() ? undefined : 'numeric' });
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
}

function shortTime(ms) {
  const now = Date.now();
  if (dayKey(ms) === dayKey(now)) return clock(ms);
  if (now - ms < 6 * 86400000) return new Date(ms).toLocaleDateString(undefined, { weekday: 'short' });
  return new Date(ms).toLocaleDateString(undefined, { day: 'numeric', month: 'short' });
}
