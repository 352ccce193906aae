// Unit tests of ParleyClient's I/O against an in-memory fake server: catch-up from the cursor,
// reconnects, re-sends with the same client_msg_id, gaps, expired cursors, the fallback to
// long-poll, and resuming from saved state. Run with `node --test web/`.

import test from 'node:test';
import assert from 'node:assert/strict';

import { ParleyClient, MsgState, memoryStorage } from '../static/sdk/parley.js';
import { CONV, FakeServer } from './fakeserver.js';

/** Polls pred until it is true, failing after a deadline (no fixed sleeps). */
async function until(what, pred, timeout = 3000) {
  const deadline = Date.now() + timeout;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

function newClient(server, over = {}) {
  return new ParleyClient({
    token: 'tok', userId: 'alice', baseURL: 'http://fake', fetch: server.fetch, WebSocket: server.WebSocket,
    storage: over.storage ?? memoryStorage(), backoff: { base: 2, max: 10 }, requestTimeout: 300, pollWait: 1, saveDelay: 1,
    ...over,
  });
}

const texts = (c) => c.messages(CONV).map((m) => m.content?.text ?? null);

for (const transport of ['websocket', 'longpoll']) {
  test(`${transport}: catches up, sends, survives a cut, re-sends once`, async (t) => {
    const server = new FakeServer();
    server.bobSays('one');
    const c = newClient(server, { transport });
    t.after(() => c.stop());
    await c.start();
    await until('online', () => c.status === 'online');
    assert.equal(c.mode, transport);
    assert.deepEqual(texts(c), ['one']);
    await until('delivered receipt', () => server.positions.alice.delivered === 1);

    server.bobSays('two');
    await until('live message', () => texts(c).length === 2);

    // The network goes away: sends wait in the outbox, shown as "sending".
    server.up = false;
    server.dropSockets(1001);
    await until('offline', () => c.status !== 'online');
    const id = c.send(CONV, 'offline');
    assert.equal(c.msgState(c.messages(CONV).at(-1)), MsgState.SENDING);

    // Back: bob wrote meanwhile; the client catches up and sends its message once.
    server.up = true;
    server.bobSays('three');
    await until('outbox drained', () => c.state.outbox.length === 0);
    await until('caught up', () => texts(c).length === 4);
    assert.deepEqual(texts(c), ['one', 'two', 'three', 'offline']);
    assert.deepEqual(c.messages(CONV).map((m) => m.seq), [1, 2, 3, 4]);
    assert.equal(server.msgs.filter((m) => m.client_msg_id === id).length, 1);
    assert.equal(c.state.cursor, server.cursor);
  });
}

test('a send whose reply is lost is re-sent with the same client_msg_id and stored once', async (t) => {
  const server = new FakeServer();
  const c = newClient(server, { transport: 'websocket' });
  t.after(() => c.stop());
  await c.start();
  await until('online', () => c.status === 'online');
  server.dropNextReply = true; // stored, then the connection dies before the ack
  const id = c.send(CONV, 'exactly once');
  await until('acked', () => c.state.outbox.length === 0);
  await until('message shown', () => c.messages(CONV).length === 1);
  assert.ok(server.sends.filter((x) => x === id).length >= 1);
  assert.equal(server.msgs.length, 1, 'the retry was deduplicated by the server');
  assert.deepEqual(texts(c), ['exactly once']);
});

test('a connection that stops answering pings is replaced', async (t) => {
  const server = new FakeServer();
  const c = newClient(server, { transport: 'websocket', heartbeat: 20, requestTimeout: 50 });
  t.after(() => c.stop());
  await c.start();
  await until('online', () => c.status === 'online');
  const first = [...server.sockets][0];
  server.deafToPings = true; // the socket looks open but nothing comes back
  await until('a new connection', () => server.sockets.size === 1 && !server.sockets.has(first));
  server.deafToPings = false;
  server.bobSays('still here');
  await until('live again', () => texts(c).length === 1);
});

test('reads are sent once and move the badge; stale reads from elsewhere do not', async (t) => {
  const server = new FakeServer();
  server.bobSays('a');
  server.bobSays('b');
  const c = newClient(server, { transport: 'websocket' });
  t.after(() => c.stop());
  await c.start();
  await until('online', () => c.status === 'online');
  assert.equal(c.unread(CONV), 2);
  assert.equal(c.markRead(CONV), true);
  assert.equal(c.unread(CONV), 0, 'the badge clears at once');
  await until('server read position', () => server.positions.alice.read === 2);
  assert.equal(c.markRead(CONV), false, 'nothing new to read');
});

test('ticks follow the peer: delivered, then read', async (t) => {
  const server = new FakeServer();
  const c = newClient(server, { transport: 'longpoll' });
  t.after(() => c.stop());
  await c.start();
  await until('online', () => c.status === 'online');
  c.send(CONV, 'hello');
  await until('sent', () => c.messages(CONV)[0]?.seq === 1);
  assert.equal(c.msgState(c.messages(CONV)[0]), MsgState.SENT);
  server.bobReads(1);
  await until('read', () => c.msgState(c.messages(CONV)[0]) === MsgState.READ);
});

test('an expired cursor (410) starts again from a snapshot', async (t) => {
  const server = new FakeServer();
  const storage = memoryStorage();
  server.bobSays('old');
  const first = newClient(server, { transport: 'websocket', storage });
  await first.start();
  await until('online', () => first.status === 'online');
  await first.stop();
  for (let i = 0; i < 5; i++) server.bobSays(`while away ${i}`);
  server.retainedFrom = server.cursor; // the events the client needs were pruned
  const c = newClient(server, { transport: 'websocket', storage });
  t.after(() => c.stop());
  const snapshotsBefore = server.snapshots;
  await c.start();
  await until('resynced', () => c.status === 'online' && c.state.cursor === server.cursor);
  assert.equal(server.snapshots, snapshotsBefore + 1);
  assert.equal(texts(c).length, 6);
});

test('a gap in pushed cursors reconnects from the last applied cursor', async (t) => {
  const server = new FakeServer();
  const c = newClient(server, { transport: 'websocket' });
  t.after(() => c.stop());
  await c.start();
  await until('online', () => c.status === 'online');
  server.bobSays('one');
  await until('first message', () => texts(c).length === 1);
  const before = c.stats.gaps;
  // A push that skips cursors (a bug, a broken proxy): nothing of it may be applied.
  const ws = [...server.sockets][0];
  ws.push({ op: 'event', event: { cursor: server.cursor + 5, type: 'message', conv_id: CONV, ts: 1, data: { ...server.msgs[0], seq: 99 } } });
  await until('reconnected after the gap', () => c.stats.gaps === before + 1 && c.status === 'online' && !server.sockets.has(ws));
  assert.equal(c.state.cursor, server.cursor, 'nothing past the gap was applied');
  assert.ok(!c.messages(CONV).some((m) => m.seq === 99));
  server.bobSays('two');
  await until('the next message on the new connection', () => texts(c).length === 2);
  assert.deepEqual(texts(c), ['one', 'two']);
});

test('auto falls back to long-poll when WebSocket keeps failing but HTTP works', async (t) => {
  const server = new FakeServer();
  server.wsBroken = true;
  const c = newClient(server, { transport: 'auto' });
  t.after(() => c.stop());
  await c.start();
  await until('online over long-poll', () => c.status === 'online' && c.mode === 'longpoll');
  assert.equal(c.stats.fallbacks, 1);
  server.bobSays('via long-poll');
  await until('message', () => texts(c).length === 1);
});

// The attack of issue 7: a message the browser cannot decode kills every socket right after it
// opens, at the same cursor. The client must back off (not reconnect in a tight loop), and
// long-poll meanwhile so the messages still arrive, then try the socket again.
test('sockets that die right after opening: growing backoff, then long-poll, then the socket again', async (t) => {
  const server = new FakeServer();
  server.wsDiesAfterOpen = true;
  server.bobSays('one');
  const c = newClient(server, {
    transport: 'auto', backoff: { base: 20, max: 1000 }, fallbackAfter: 3, longPollFor: 300, stableAfter: 200,
  });
  const delays = [];
  c.addEventListener('retry', (e) => delays.push(e.detail.delay));
  t.after(() => c.stop());
  await c.start();

  await until('fell back to long-poll', () => c.mode === 'longpoll' && c.status === 'online');
  assert.equal(server.wsOpens.length, 3, 'three sockets, then long-poll');
  assert.equal(c.stats.fallbacks, 1);
  // Attempts 0, 1, 2 wait in [10,20], [20,40], [40,80] ms: each at least the one before.
  assert.ok(delays.length >= 2, `delays ${delays}`);
  for (let i = 1; i < delays.length; i++) assert.ok(delays[i] >= delays[i - 1], `backoff grows: ${delays}`);
  assert.ok(delays[delays.length - 1] > delays[0], `backoff grows: ${delays}`);
  for (let i = 1; i < server.wsOpens.length; i++) {
    const gap = server.wsOpens[i] - server.wsOpens[i - 1];
    assert.ok(gap >= delays[i - 1] - 1, `socket ${i} came ${gap} ms after the previous, before its backoff ${delays[i - 1]} ms`);
  }

  server.bobSays('two');
  await until('a message over long-poll', () => texts(c).length === 2);
  assert.deepEqual(texts(c), ['one', 'two']);

  // After longPollFor the socket is tried again; it still dies, so long-poll resumes at once.
  await until('the socket tried again', () => server.wsOpens.length === 4);
  await until('long-poll again', () => c.stats.fallbacks === 2 && c.mode === 'longpoll');
  server.bobSays('three');
  await until('a message over long-poll again', () => texts(c).length === 3);

  // Once sockets stay open, the client stays on WebSocket.
  server.wsDiesAfterOpen = false;
  await until('back on WebSocket', () => c.mode === 'websocket' && c.status === 'online' && server.sockets.size === 1, 3000);
  await until('stable', () => c._wsFailures === 0);
  server.bobSays('four');
  await until('a message over WebSocket', () => texts(c).length === 4);
  assert.equal(c.mode, 'websocket');
  assert.equal(c.stats.fallbacks, 2);
});

test('with transport "websocket", dying sockets back off but never long-poll', async (t) => {
  const server = new FakeServer();
  server.wsDiesAfterOpen = true;
  const c = newClient(server, { transport: 'websocket', backoff: { base: 20, max: 80 }, fallbackAfter: 2 });
  t.after(() => c.stop());
  await c.start();
  await until('five sockets', () => server.wsOpens.length >= 5);
  assert.equal(c.stats.fallbacks, 0);
  assert.ok(!server.requests.includes('GET /v1/sync'), 'no long-poll');
  const spread = server.wsOpens[4] - server.wsOpens[0];
  assert.ok(spread >= 10 + 20 + 40 + 40, `four backoffs took ${spread} ms: a tight loop`);
});

test('without a WebSocket implementation the client long-polls', async (t) => {
  const server = new FakeServer();
  const c = newClient(server, { transport: 'auto', WebSocket: null });
  c.WebSocketImpl = undefined;
  t.after(() => c.stop());
  await c.start();
  await until('online', () => c.status === 'online');
  assert.equal(c.mode, 'longpoll');
});

test('a reload resumes from the saved cursor and outbox, without a snapshot', async () => {
  const server = new FakeServer();
  const storage = memoryStorage();
  server.bobSays('before');
  const first = newClient(server, { transport: 'websocket', storage });
  await first.start();
  await until('online', () => first.status === 'online');
  server.up = false;
  server.dropSockets(1006);
  await until('offline', () => first.status !== 'online');
  const id = first.send(CONV, 'typed offline, then the tab closed');
  await first.stop();

  server.up = true;
  server.bobSays('while closed');
  const snapshots = server.snapshots;
  const second = newClient(server, { transport: 'websocket', storage });
  await second.start();
  assert.deepEqual(texts(second), ['before', 'typed offline, then the tab closed'], 'the saved state shows at once');
  await until('outbox sent', () => second.state.outbox.length === 0);
  await until('caught up', () => texts(second).length === 3);
  assert.equal(server.snapshots, snapshots, 'resumed from the cursor');
  assert.deepEqual(texts(second), ['before', 'while closed', 'typed offline, then the tab closed']);
  assert.equal(server.msgs.filter((m) => m.client_msg_id === id).length, 1);
  await second.stop();
});

test('a refused token stops the client with an autherror event', async () => {
  const server = new FakeServer();
  const realFetch = server.fetch;
  const c = newClient(server, {
    transport: 'longpoll',
    fetch: async (url, init) => (url.includes('/v1/sync') ? new Response('{"code":401,"error":"not authenticated: token revoked"}', { status: 401 }) : realFetch(url, init)),
  });
  const got = new Promise((resolve) => c.addEventListener('autherror', resolve, { once: true }));
  await c.start();
  const ev = await got;
  assert.equal(ev.detail.error.code, 401);
  await until('stopped', () => c.status === 'offline');
});

test('a snapshot in pages is assembled before the client syncs from its cursor', async (t) => {
  const server = new FakeServer();
  server.bobSays('one');
  const c = newClient(server);
  t.after(() => c.stop());
  await c.start();
  await until('online', () => c.status === 'online');
  assert.deepEqual(texts(c), ['one']);
  assert.equal(c.state.cursor, server.cursor);
  assert.ok(server.requests.filter((r) => r === 'GET /v1/sync/snapshot').length >= 2, 'second page fetched');
});

test('members come from the members call, every page, with names', async () => {
  const server = new FakeServer();
  const c = newClient(server);
  const list = await c.loadMembers(CONV);
  assert.deepEqual(list.map((m) => m.name), ['Alice', 'Bob']);
  assert.deepEqual(c.members(CONV), ['alice', 'bob']);
  assert.deepEqual(c.memberList(CONV).map((m) => m.user_id), ['alice', 'bob']);
  assert.deepEqual(await c.me(), { user_id: 'alice', device_id: 'web', name: 'Alice', presence: 'visible' });
});
