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
  assert.deepEqual(await c.me(), { user_id: 'alice', device_id: 'web', name: 'Alice' });
});
