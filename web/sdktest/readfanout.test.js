// Unit tests of read-fanout conversations (docs/protocol.md section 10) in the JS SDK: notices
// update the counters at once and are pulled after their delay (coalesced), open
// conversations get pushes with gaps filled and repeats dropped, 429 waits its Retry-After,
// the mark is saved and sent, and receipts pushes reach receipts(). Pull timers run on a
// clock the tests advance by hand.

import test from 'node:test';
import assert from 'node:assert/strict';

import { ParleyClient, ChatState, memoryStorage } from '../static/sdk/parley.js';
import { GROUP, FakeServer } from './fakeserver.js';
import { until, manualTimers } from './helpers.js';

function newClient(server, over = {}) {
  return new ParleyClient({
    token: 'tok', userId: 'alice', baseURL: 'http://fake', fetch: server.fetch, WebSocket: server.WebSocket,
    storage: memoryStorage(), backoff: { base: 2, max: 10 }, requestTimeout: 300, pollWait: 1, saveDelay: 1,
    transport: 'websocket', ...over,
  });
}

const seqs = (c) => c.messages(GROUP).map((m) => m.seq);

async function started(server, over = {}) {
  server.group.inSnapshot = true;
  const timers = manualTimers();
  const c = newClient(server, { timers, ...over });
  await c.start();
  await until('online', () => c.status === 'online');
  await until('the group', () => c.conversation(GROUP));
  return { c, timers };
}

test('a notice updates the badge at once and is fetched after its pull delay, coalesced', async (t) => {
  const server = new FakeServer();
  server.groupSays('before', { push: false }); // in the snapshot: not fetched again
  const { c, timers } = await started(server);
  t.after(() => c.stop());
  assert.equal(c.unread(GROUP), 1);
  server.historyPage = 2;

  server.groupSays('one');
  await until('the notice', () => c.conversation(GROUP).max_seq === 2);
  assert.equal(c.unread(GROUP), 2, 'the badge moves before any fetch');
  assert.deepEqual(timers.delays(), [1840], 'one pull, after the notice\'s delay');
  server.group.noticeDelay = 10;
  server.groupSays('two');
  server.groupSays('three');
  server.group.members = 1001;
  server.groupSays('four');
  await until('the notices', () => c.conversation(GROUP).max_seq === 5);
  assert.equal(c.unread(GROUP), 5);
  assert.equal(c.conversation(GROUP).members_count, 1001);
  assert.deepEqual(timers.delays(), [1840], 'later notices join the scheduled pull');
  assert.deepEqual(server.historyAfter, [], 'nothing fetched before the delay');

  timers.fire();
  await until('fetched', () => seqs(c).length === 4);
  assert.deepEqual(seqs(c), [2, 3, 4, 5], 'after the last seq held, up to max_seq');
  assert.deepEqual(server.historyAfter, [1, 3], 'paged');
  assert.equal(c.unread(GROUP), 5, 'fetching is not reading');
  c.markRead(GROUP);
  assert.equal(c.unread(GROUP), 0);
});

test('an open conversation gets pushes in seq order: gaps fetched first, repeats dropped', async (t) => {
  const server = new FakeServer();
  const { c } = await started(server);
  t.after(() => c.stop());
  server.groupSays('before the open', { push: false });
  await c.openConversation(GROUP);
  await until('the catch-up of the open', () => seqs(c).length === 1);

  server.groupSays('live');
  await until('pushed', () => seqs(c).length === 2);
  const ws = [...server.sockets][0];
  const m3 = server.groupSays('not pushed', { push: false });
  const m4 = server.groupSays('pushed past a gap', { push: false });
  ws.push({ op: 'message', message: m4 });
  await until('the gap filled', () => seqs(c).length === 4);
  ws.push({ op: 'message', message: m3 }); // a repeat of what history brought
  ws.push({ op: 'message', message: m4 });
  server.groupSays('next');
  await until('the next push', () => seqs(c).length === 5);
  assert.deepEqual(seqs(c), [1, 2, 3, 4, 5]);
  assert.deepEqual(server.historyAfter, [0, 2], 'the open\'s catch-up, then only the gap');

  // Re-opened after a reconnect.
  server.dropSockets(1001);
  await until('reopened', () => [...server.sockets].some((s) => s.opened.has(GROUP)));
  await c.closeConversation(GROUP);
  await until('closed', () => ![...server.sockets].some((s) => s.opened.has(GROUP)));
});

test('a 429 on a pull waits for its Retry-After', async (t) => {
  const server = new FakeServer();
  const { c, timers } = await started(server);
  t.after(() => c.stop());
  server.historyFail = [429];
  server.group.noticeDelay = 0; // pulled at once, refused
  server.groupSays('x');
  await until('the retry timer', () => timers.delays().length === 1);
  assert.deepEqual(timers.delays(), [2000]);
  assert.equal(server.historyAfter.length, 1);
  timers.fire();
  await until('fetched', () => seqs(c).length === 1);
});

test('the mark is saved with the cursor and sent on every sync', async (t) => {
  const server = new FakeServer();
  server.groupSays('a', { push: false });
  const storage = memoryStorage();
  const { c } = await started(server, { storage });
  t.after(() => c.stop());
  assert.equal(c.state.mark, 1, 'the snapshot\'s mark');
  assert.ok([...server.sockets][0].url.includes('mark=1'));
  await c.stop();
  assert.equal((await storage.load('parley:alice')).mark, 1);

  // Offline meanwhile: two messages. The reloaded client sends its mark and the changes
  // frame brings the brief, fetched after a random wait (here the clock fires it).
  server.groupSays('b', { push: false });
  server.groupSays('c', { push: false });
  const timers = manualTimers();
  const c2 = newClient(server, { storage, timers });
  t.after(() => c2.stop());
  await c2.start();
  await until('online', () => c2.status === 'online');
  assert.ok([...server.sockets][0].url.includes('mark=1'));
  await until('the changes frame', () => c2.state.mark === 3 && c2.unread(GROUP) === 3);
  await until('a pull scheduled', () => timers.delays().length === 1);
  assert.ok(timers.delays()[0] <= 3000);
  timers.fire();
  await until('fetched', () => seqs(c2).length === 2);
  assert.deepEqual(seqs(c2), [2, 3], 'after the snapshot\'s max_seq, where it left off');

  // Long-poll sends it too, and applies the briefs of its answer.
  await c2.stop();
  server.groupSays('d', { push: false });
  const timers3 = manualTimers();
  const c3 = newClient(server, { storage, timers: timers3, transport: 'longpoll' });
  t.after(() => c3.stop());
  await c3.start();
  await until('the sync answer', () => c3.state.mark === 4);
  assert.ok(server.requests.length > 0);
  assert.equal(c3.conversation(GROUP).max_seq, 4);
});

test('receipts pushes reach receipts() without a request', async (t) => {
  const server = new FakeServer();
  const { c } = await started(server);
  t.after(() => c.stop());
  const changed = new Promise((resolve) => c.addEventListener('change', (e) => { if (e.detail.convs.has(GROUP)) resolve(); }));
  [...server.sockets][0].push({ op: 'receipts', conv_id: GROUP, receipts: [{ seq: 4, member_count: 999, read_count: 128, delivered_count: 190 }] });
  await changed;
  assert.deepEqual(c.receipts(GROUP, 4), { seq: 4, member_count: 999, read_count: 128, delivered_count: 190 });
  assert.ok(!server.requests.some((r) => r.includes('/receipts')));
});

test('ChatState: briefs are state, applied idempotently; a stale one changes nothing', () => {
  const s = new ChatState('alice');
  const brief = (max_seq, unread) => ({ conv_id: GROUP, type: 'group', name: 'G', members_count: 9, fanout: 'read', max_seq, read_seq: 0, unread, updated_at: 1 });
  s.applyBriefs(5, [brief(4, 4)]);
  assert.deepEqual(s.takeEffects().map((e) => e.type), ['pull']);
  assert.equal(s.readHave(GROUP), 0, 'a new conversation starts at its read floor');
  s.applyBriefs(5, [brief(4, 4)]);
  s.applyBriefs(3, [brief(2, 2)]);
  assert.equal(s.mark, 5, 'the mark never moves back');
  assert.equal(s.conversation(GROUP).max_seq, 4);
  assert.equal(s.unread(GROUP), 4);
  assert.deepEqual(s.pullRange(GROUP), { after: 0, upTo: 4 });
  s.addPulled(GROUP, [3, 1, 2, 4].map((seq) => ({ conv_id: GROUP, seq, msg_id: `m${seq}`, sender_id: 'bob', created_at: seq, content: { text: `${seq}` } })));
  assert.deepEqual(s.messages(GROUP).map((m) => m.seq), [1, 2, 3, 4]);
  assert.equal(s.pullRange(GROUP), null);
  // The server's unread (a read on another device) wins; the own read recomputes it.
  s.applyNotice({ conv_id: GROUP, max_seq: 6, unread: 1, members_count: 10, pull_delay_ms: 5 });
  assert.equal(s.unread(GROUP), 1);
  s.setRead(GROUP, 6);
  assert.equal(s.unread(GROUP), 0);
  const restored = ChatState.fromJSON(JSON.parse(JSON.stringify(s.toJSON())), 'alice');
  assert.equal(restored.mark, 5);
  assert.deepEqual(restored.pendingPulls(), [GROUP], 'announced messages not fetched are fetched after a reload');
});
