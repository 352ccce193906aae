// Unit tests of typing indicators (docs/protocol.md section 9.10) in the JS SDK: keystrokes
// are throttled to one "started" per 3 s and stopped by a send or the idle timer; typing
// pushes reach typing() and expire by themselves. Timers run on a clock the tests fire by
// hand.

import test from 'node:test';
import assert from 'node:assert/strict';

import { ParleyClient, memoryStorage } from '../static/sdk/parley.js';
import { CONV, GROUP, FakeServer } from './fakeserver.js';
import { until, manualTimers } from './helpers.js';


async function online(server) {
  const timers = manualTimers();
  const c = new ParleyClient({
    token: 'tok', userId: 'alice', baseURL: 'http://fake', fetch: server.fetch, WebSocket: server.WebSocket,
    storage: memoryStorage(), backoff: { base: 2, max: 10 }, requestTimeout: 300, pollWait: 1, saveDelay: 1,
    transport: 'websocket', timers,
  });
  await c.start();
  await until('online', () => c.status === 'online');
  return { c, timers };
}

test('keystrokes send one started per 3 s; a send stops it', async (t) => {
  const server = new FakeServer();
  const { c } = await online(server);
  t.after(() => c.stop());
  for (let i = 0; i < 10; i++) c.keystroke(CONV);
  c.send(CONV, 'hello');
  await until('the frames', () => server.typing.length === 2);
  assert.deepEqual(server.typing, [`${CONV} started`, `${CONV} stopped`]);
  c.stopTyping(CONV); // nothing standing: nothing sent
  await until('the send', () => server.sends.length === 1);
  assert.equal(server.typing.length, 2);
});

test('the idle timer stops typing', async (t) => {
  const server = new FakeServer();
  const { c, timers } = await online(server);
  t.after(() => c.stop());
  c.keystroke(CONV);
  assert.ok(timers.delays().includes(5000), `timers ${timers.delays()}`);
  timers.fire();
  await until('stopped', () => server.typing.length === 2);
  assert.deepEqual(server.typing, [`${CONV} started`, `${CONV} stopped`]);
});

test('typing pushes show who types, and expire by themselves', async (t) => {
  const server = new FakeServer();
  const { c, timers } = await online(server);
  t.after(() => c.stop());
  let events = 0;
  c.addEventListener('typing', () => events++);
  server.pushAll({ op: 'typing', conv_id: CONV, user_id: 'bob', state: 'started', expires_in_ms: 6000 });
  await until('bob typing', () => c.typing(CONV).users.length === 1);
  assert.deepEqual(c.typing(CONV), { users: ['bob'], count: 1 });
  server.pushAll({ op: 'typing', conv_id: CONV, user_id: 'bob', state: 'stopped', expires_in_ms: 0 });
  await until('bob stopped', () => c.typing(CONV).users.length === 0);

  // A read-fanout set: alice's own id is left out, the count says how many more.
  server.pushAll({ op: 'typing', conv_id: GROUP, user_id: 'u6', state: 'started', expires_in_ms: 6000,
    typers: ['u1', 'alice', 'u2', 'u3', 'u4'], count: 7 });
  await until('the set', () => c.typing(GROUP).users.length === 4);
  assert.deepEqual(c.typing(GROUP), { users: ['u1', 'u2', 'u3', 'u4'], count: 6 });
  assert.ok(events >= 3);
  // The expiry timer: once it fires after the set's time, nothing is shown.
  const delays = timers.delays();
  assert.ok(delays.some((d) => d > 5000 && d <= 6000), `timers ${delays}`);
});
