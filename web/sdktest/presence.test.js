// Unit tests of presence (docs/protocol.md section 9.11) in the JS SDK: a subscription's
// answer and the pushes after it reach presence() and "presence" events, the set and away
// are told again on every new socket, and the HTTP calls.

import test from 'node:test';
import assert from 'node:assert/strict';

import { MAX_PRESENCE_SUBSCRIPTIONS, ParleyClient, memoryStorage } from '../static/sdk/parley.js';
import { FakeServer } from './fakeserver.js';
import { until, manualTimers } from './helpers.js';

async function online(server) {
  const c = new ParleyClient({
    token: 'tok', userId: 'alice', baseURL: 'http://fake', fetch: server.fetch, WebSocket: server.WebSocket,
    storage: memoryStorage(), backoff: { base: 2, max: 10 }, requestTimeout: 300, pollWait: 1, saveDelay: 1,
    transport: 'websocket', timers: manualTimers(),
  });
  await c.start();
  await until('online', () => c.status === 'online');
  return c;
}

test('a subscription answers at once; pushes change presence()', async (t) => {
  const server = new FakeServer();
  server.presence.set('bob', { user_id: 'bob', state: 'away', last_active_at: '2026-12-07T16:32:00Z' });
  const c = await online(server);
  t.after(() => c.stop());
  const changed = [];
  c.addEventListener('presence', (e) => changed.push(...e.detail.users));

  assert.equal(c.presence('bob'), null);
  const now = await c.subscribePresence(['bob', 'carol']);
  assert.deepEqual(now.map((p) => p.state), ['away', 'offline']);
  assert.deepEqual(c.presence('bob'), { state: 'away', last_active_at: '2026-12-07T16:32:00Z' });
  assert.deepEqual(c.presence('carol'), { state: 'offline' });
  assert.deepEqual(changed, ['bob', 'carol']);

  server.pushAll({ op: 'presence', presence: [{ user_id: 'bob', state: 'online' }, { user_id: 'zed', state: 'online' }] });
  await until('bob online', () => c.presence('bob')?.state === 'online');
  assert.deepEqual(c.presence('bob'), { state: 'online' });
  assert.equal(c.presence('zed'), null, 'a user not followed is not kept');

  await c.unsubscribePresence(['carol']);
  assert.equal(c.presence('carol'), null);
  await c.subscribePresence(['dave'], { replace: true });
  assert.equal(c.presence('bob'), null, 'replaced away');
  assert.deepEqual(server.presenceOps, [
    { op: 'presence_subscribe', users: ['bob', 'carol'] },
    { op: 'presence_unsubscribe', users: ['carol'] },
    { op: 'presence_subscribe', users: ['dave'], replace: true },
  ]);

  const many = Array.from({ length: MAX_PRESENCE_SUBSCRIPTIONS + 1 }, (_, i) => `u${i}`);
  await assert.rejects(c.subscribePresence(many, { replace: true }), (e) => e.code === 400);
  assert.equal(server.presenceOps.length, 3, 'refused before anything was sent');
});

test('a new socket is told the set and away again', async (t) => {
  const server = new FakeServer();
  const c = await online(server);
  t.after(() => c.stop());
  await c.subscribePresence(['bob']);
  await c.subscribePresence(['carol']);
  await c.setAway(true);
  server.presenceOps.length = 0;
  server.presence.set('bob', { user_id: 'bob', state: 'online' });

  server.dropSockets();
  await until('the restore', () => server.presenceOps.length === 2);
  assert.deepEqual(server.presenceOps, [
    { op: 'presence_subscribe', users: ['bob', 'carol'], replace: true },
    { op: 'presence_set', state: 'away' },
  ]);
  await until('the new answer', () => c.presence('bob')?.state === 'online');
});

test('offline, a subscription is recorded and sent once connected', async (t) => {
  const server = new FakeServer();
  const c = new ParleyClient({
    token: 'tok', userId: 'alice', baseURL: 'http://fake', fetch: server.fetch, WebSocket: server.WebSocket,
    storage: memoryStorage(), backoff: { base: 2, max: 10 }, requestTimeout: 300, saveDelay: 1, transport: 'websocket',
  });
  assert.deepEqual(await c.subscribePresence(['bob']), []);
  await c.start();
  t.after(() => c.stop());
  await until('bob known', () => c.presence('bob') !== null);
  assert.deepEqual(server.presenceOps, [{ op: 'presence_subscribe', users: ['bob'], replace: true }]);
});

test('getPresence and setPresenceHidden are HTTP calls', async (t) => {
  const server = new FakeServer();
  server.presence.set('bob', { user_id: 'bob', state: 'online' });
  const c = await online(server);
  t.after(() => c.stop());
  assert.deepEqual(await c.getPresence(['bob', 'carol']), [
    { user_id: 'bob', state: 'online' }, { user_id: 'carol', state: 'offline' },
  ]);
  assert.equal(c.presence('bob'), null, 'asking is not following');
  assert.equal((await c.setPresenceHidden(true)).presence, 'hidden');
  assert.equal(server.hidden, true);
  assert.equal((await c.setPresenceHidden(false)).presence, 'visible');
  assert.equal(server.hidden, false);
});
