// Unit tests of "jump to a date" (docs/protocol.md 6.3): messagesAround merges the page around
// a time into the state, loadOlder pages down from it and loadNewer fills the hole up to the
// newest messages; the fake server answers around_ts as the protocol says. Run with
// `node --test web/`.

import test from 'node:test';
import assert from 'node:assert/strict';

import { ChatState, ParleyClient, memoryStorage } from '../static/sdk/parley.js';
import { CONV, FakeServer } from './fakeserver.js';

/** Polls pred until it is true, failing after a deadline (no fixed sleeps). */
async function until(what, pred, timeout = 3000) {
  const deadline = Date.now() + timeout;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

const seqs = (c) => c.messages(CONV).map((m) => m.seq);
const range = (from, to) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** A server with n messages from bob, a second apart, and alice's client synced to it. */
async function synced(t, n, over = {}) {
  const server = new FakeServer();
  server.msgSpacing = 1000;
  for (let i = 1; i <= n; i++) server.bobSays(`m${i}`);
  const c = new ParleyClient({
    token: 'tok', userId: 'alice', baseURL: 'http://fake', fetch: server.fetch, WebSocket: server.WebSocket,
    storage: memoryStorage(), backoff: { base: 2, max: 10 }, requestTimeout: 300, pollWait: 1, saveDelay: 1, ...over,
  });
  t.after(() => c.stop());
  await c.start();
  await until('online', () => c.status === 'online');
  return { server, c };
}

test('a jump loads the page around the date; loadOlder and loadNewer scroll both ways from it', async (t) => {
  const { server, c } = await synced(t, 120); // the snapshot brings the newest 30: 91..120
  assert.deepEqual(seqs(c), range(91, 120));
  assert.equal(c.hasNewer(CONV), false);

  // Between messages 39 and 40: 40 is the anchor, 10 before it and 10 from it on.
  const page = await c.messagesAround(CONV, new Date(server.createdAt(40) - 400), 20);
  assert.equal(page.anchor_seq, 40);
  assert.deepEqual(page.messages.map((m) => m.seq), range(30, 49));
  assert.equal(page.has_more_before, true);
  assert.equal(page.has_more_after, true);
  assert.deepEqual(seqs(c), [...range(30, 49), ...range(91, 120)]);
  assert.deepEqual(c.firstGap(CONV), [50, 90]);
  assert.equal(c.hasNewer(CONV), true);
  assert.equal(c.hasOlder(CONV), true);

  // Up: older pages below the page jumped to.
  await c.loadOlder(CONV, 20);
  assert.deepEqual(seqs(c).slice(0, 21), range(10, 30));

  // Down: later pages from the top of the page jumped to, until the hole is filled.
  const before = server.historyQueries.length;
  assert.equal(await c.loadNewer(CONV, 20), true);
  assert.deepEqual(c.firstGap(CONV), [70, 90]);
  assert.equal(await c.loadNewer(CONV, 20), true);
  assert.equal(await c.loadNewer(CONV, 20), false);
  assert.deepEqual(server.historyQueries.slice(before), ['?after_seq=49&limit=20', '?after_seq=69&limit=20', '?after_seq=89&limit=20']);
  assert.deepEqual(seqs(c), range(10, 120));
  assert.equal(await c.loadNewer(CONV, 20), false, 'nothing left: no request');
  assert.equal(server.historyQueries.length, before + 3);

  // Live again: a new message follows the newest.
  server.bobSays('new');
  await until('the live message', () => seqs(c).at(-1) === 121);
  assert.equal(c.hasNewer(CONV), false);
});

test('live messages during a jump land above the hole; loadNewer still fills it', async (t) => {
  const { server, c } = await synced(t, 100);
  await c.messagesAround(CONV, server.createdAt(10), 10);
  assert.deepEqual(c.firstGap(CONV), [15, 70]);
  server.bobSays('while away');
  await until('the live message', () => seqs(c).at(-1) === 101);
  assert.deepEqual(c.firstGap(CONV), [15, 70]);
  while (await c.loadNewer(CONV, 200)) { /* one page fills it */ }
  assert.deepEqual(seqs(c), range(5, 101));
});

test('a jump past the newest message answers the newest page and no anchor; one before the first, the first', async (t) => {
  const { server, c } = await synced(t, 40);
  const late = await c.messagesAround(CONV, server.createdAt(40) + 1, 6);
  assert.equal(late.anchor_seq, 0);
  assert.deepEqual(late.messages.map((m) => m.seq), range(35, 40));
  assert.equal(late.has_more_before, true);
  assert.equal(late.has_more_after, false);
  assert.equal(c.hasNewer(CONV), false);

  const early = await c.messagesAround(CONV, 1, 6);
  assert.equal(early.anchor_seq, 1);
  assert.deepEqual(early.messages.map((m) => m.seq), range(1, 6));
  assert.equal(early.has_more_before, false);
  assert.equal(c.hasOlder(CONV), false, 'nothing is older than the first message');
  assert.deepEqual(c.firstGap(CONV), [7, 10]);
  assert.equal(await c.loadNewer(CONV), false);
  assert.deepEqual(seqs(c), range(1, 40));
});

test('a second jump drops the messages below it that a hole separates from it', async (t) => {
  const { server, c } = await synced(t, 120);
  await c.messagesAround(CONV, server.createdAt(10), 20); // 1..20
  await c.messagesAround(CONV, server.createdAt(40), 20); // 30..49: 1..20 is below a hole
  assert.deepEqual(seqs(c), [...range(30, 49), ...range(91, 120)]);
  assert.equal(c.hasOlder(CONV), true, 'the first message is no longer held: older ones exist');
  await c.messagesAround(CONV, server.createdAt(50), 20); // 40..59: 30..39 joins it
  assert.deepEqual(seqs(c), [...range(30, 59), ...range(91, 120)]);
  await c.messagesAround(CONV, server.createdAt(100), 20); // 90..109 joins the newest
  assert.deepEqual(seqs(c), range(90, 120));
  assert.equal(c.hasNewer(CONV), false);
});

test('saved state keeps the newest messages, not a page jumped to below a hole', async (t) => {
  const { server, c } = await synced(t, 120);
  await c.messagesAround(CONV, server.createdAt(40), 20);
  await c.loadOlder(CONV, 20); // down to 10..29, below the page
  const saved = c.state.toJSON();
  assert.deepEqual(saved.msgs[CONV].map((m) => m.seq), range(91, 120));
  const back = ChatState.fromJSON(JSON.parse(JSON.stringify(saved)), 'alice');
  assert.deepEqual(back.gaps(CONV), [], 'a reload has no hole to fill');
  assert.equal(back.hasOlder(CONV), true);

  // "Nothing older" is not saved for messages that are not saved either.
  await c.messagesAround(CONV, 1, 10);
  assert.equal(c.hasOlder(CONV), false);
  assert.equal(ChatState.fromJSON(c.state.toJSON(), 'alice').hasOlder(CONV), true);
});

test('the fake server refuses around_ts as the protocol does, and messagesAround refuses a bad time', async (t) => {
  const { c } = await synced(t, 3);
  for (const [q, error] of [
    ['around_ts=0', 'invalid request: query parameter around_ts must be at least 1'],
    ['around_ts=soon', 'invalid request: query parameter around_ts must be an integer'],
    ['around_ts=5&after_seq=1', 'invalid request: around_ts goes without after_seq and before_seq'],
    ['around_ts=5&before_seq=2', 'invalid request: around_ts goes without after_seq and before_seq'],
  ]) {
    await assert.rejects(c._http('GET', `/v1/conversations/${CONV}/messages?${q}`), { code: 400, message: error });
  }
  // after_seq=0 counts as absent, and fields that are false are absent.
  const r = await c._http('GET', `/v1/conversations/${CONV}/messages?around_ts=1&after_seq=0&limit=5`);
  assert.deepEqual(Object.keys(r).sort(), ['anchor_seq', 'has_more', 'messages']);
  assert.equal(r.has_more, false);
  const plain = await c._http('GET', `/v1/conversations/${CONV}/messages?after_seq=0`);
  assert.deepEqual(Object.keys(plain).sort(), ['has_more', 'messages']);

  await assert.rejects(c.messagesAround(CONV, 'yesterday'), { code: 400 });
});

test('backToNewest leaves a jump without filling the hole: the newest messages remain', async (t) => {
  const { server, c } = await synced(t, 120);
  await c.messagesAround(CONV, server.createdAt(40), 20);
  assert.equal(c.hasNewer(CONV), true);
  const before = server.historyQueries.length;
  c.backToNewest(CONV);
  assert.deepEqual(seqs(c), range(91, 120));
  assert.equal(c.hasNewer(CONV), false);
  assert.equal(c.hasOlder(CONV), true);
  assert.equal(server.historyQueries.length, before, 'no request');
  c.backToNewest(CONV); // nothing to leave: unchanged
  assert.deepEqual(seqs(c), range(91, 120));
});
