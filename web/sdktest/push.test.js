// Unit tests of Web Push in the client: the service worker (static/sw.js, run in a vm with a
// fake `self`) and the page's setup (static/push.js, with a fake browser and server). Run
// with `node --test web/`.

import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import vm from 'node:vm';

import { WebPushSetup, sameKey, urlBase64ToUint8Array, pushSupported } from '../static/push.js';

const ORIGIN = 'https://parley.example';

// ---- the service worker ----

/** Loads sw.js into a fake service worker global and returns its handlers and what it did. */
function loadWorker({ windows = [], badging = true } = {}) {
  const did = { notifications: [], badges: [], focused: [], opened: [], posted: [] };
  const handlers = {};
  const self = {
    location: new URL(`${ORIGIN}/sw.js`),
    addEventListener: (type, fn) => { handlers[type] = fn; },
    skipWaiting: () => {},
    registration: { showNotification: async (title, options) => { did.notifications.push({ title, ...options }); } },
    clients: {
      claim: async () => {},
      matchAll: async () => windows.map((w) => ({
        ...w,
        focus: async () => { did.focused.push(w.url); },
        postMessage: (m) => { did.posted.push({ url: w.url, ...m }); },
      })),
      openWindow: async (url) => { did.opened.push(url); },
    },
    navigator: badging ? {
      setAppBadge: async (n) => { did.badges.push(n); },
      clearAppBadge: async () => { did.badges.push(0); },
    } : {},
  };
  vm.runInNewContext(readFileSync(new URL('../static/sw.js', import.meta.url), 'utf8'), { self, URL, Number, Date, JSON, console });
  /** Dispatches an event to the worker and waits for what it passed to waitUntil. */
  const dispatch = async (type, event) => {
    let done = Promise.resolve();
    handlers[type]({ ...event, waitUntil: (p) => { done = p; } });
    await done;
  };
  return { did, handlers, dispatch };
}

const pushEvent = (data) => ({ data: data === undefined ? null : { json: () => JSON.parse(data) } });

const message = {
  type: 'message', push_id: 'p1', conv_id: 'd_alice_bob', seq: '7', cursor: '12', sender_id: 'bob',
  sender_name: 'Bob', badge: '3', preview: 'see you at 5',
};

test('sw: a message push shows a notification per conversation and sets the badge', async () => {
  const w = loadWorker();
  await w.dispatch('push', pushEvent(JSON.stringify(message)));
  assert.equal(w.did.notifications.length, 1);
  const n = w.did.notifications[0];
  assert.equal(n.title, 'Bob');
  assert.equal(n.body, 'see you at 5');
  assert.equal(n.tag, 'd_alice_bob');
  assert.deepEqual({ ...n.data }, { conv_id: 'd_alice_bob', seq: 7 }); // the object is of the vm's realm
  assert.deepEqual(w.did.badges, [3]);
});

test('sw: without a preview the body says "New message"; without a name, the sender id', async () => {
  const w = loadWorker();
  const { preview, sender_name: _, ...rest } = message;
  await w.dispatch('push', pushEvent(JSON.stringify(rest)));
  assert.equal(w.did.notifications[0].body, 'New message');
  assert.equal(w.did.notifications[0].title, 'bob');
});

test('sw: an attachment message without a preview says what it carries, not what is in it', async () => {
  const w = loadWorker();
  const { preview, ...rest } = message;
  for (const [kind, body] of [['image', 'Photo'], ['file', 'File'], ['audio', 'Voice message'], ['video', 'Video'], ['hologram', 'New message']]) {
    await w.dispatch('push', pushEvent(JSON.stringify({ ...rest, kind })));
    assert.equal(w.did.notifications.at(-1).body, body, kind);
  }
});

test('sw: a badge push sets or clears the badge and shows nothing', async () => {
  const w = loadWorker();
  await w.dispatch('push', pushEvent(JSON.stringify({ type: 'badge', push_id: 'p2', badge: '0' })));
  await w.dispatch('push', pushEvent(JSON.stringify({ type: 'badge', push_id: 'p3', badge: '4' })));
  assert.deepEqual(w.did.badges, [0, 4]);
  assert.equal(w.did.notifications.length, 0);
});

test('sw: without the Badging API a message still shows; junk data is ignored', async () => {
  const w = loadWorker({ badging: false });
  await w.dispatch('push', pushEvent(JSON.stringify(message)));
  await w.dispatch('push', pushEvent('not json'));
  await w.dispatch('push', pushEvent(undefined));
  assert.equal(w.did.notifications.length, 1);
});

test('sw: no notification while the conversation is on screen in a focused window', async () => {
  const url = `${ORIGIN}/#c=d_alice_bob`;
  const w = loadWorker({ windows: [{ url, focused: true, visibilityState: 'visible' }] });
  await w.dispatch('push', pushEvent(JSON.stringify(message)));
  assert.equal(w.did.notifications.length, 0);
  const other = loadWorker({ windows: [{ url: `${ORIGIN}/#c=g_team`, focused: true, visibilityState: 'visible' }] });
  await other.dispatch('push', pushEvent(JSON.stringify(message)));
  assert.equal(other.did.notifications.length, 1);
});

test('sw: a click focuses an open app window and asks it to open the conversation', async () => {
  const w = loadWorker({ windows: [{ url: `${ORIGIN}/static/icon.svg` }, { url: `${ORIGIN}/#c=g_team` }] });
  let closed = false;
  await w.dispatch('notificationclick', { notification: { data: { conv_id: 'd_alice_bob', seq: 7 }, close: () => { closed = true; } } });
  assert.ok(closed);
  assert.deepEqual(w.did.focused, [`${ORIGIN}/#c=g_team`]);
  assert.deepEqual(w.did.posted, [{ url: `${ORIGIN}/#c=g_team`, type: 'open', conv_id: 'd_alice_bob' }]);
  assert.deepEqual(w.did.opened, []);
});

test('sw: a click with no app window open opens one at the conversation', async () => {
  const w = loadWorker();
  await w.dispatch('notificationclick', { notification: { data: { conv_id: 'g/1 x' }, close: () => {} } });
  assert.deepEqual(w.did.opened, [`${ORIGIN}/#c=g%2F1%20x`]);
});

// ---- the page's setup ----

test('urlBase64ToUint8Array decodes with and without padding; sameKey compares bytes', () => {
  assert.deepEqual([...urlBase64ToUint8Array('-_8')], [0xfb, 0xff]);
  assert.deepEqual([...urlBase64ToUint8Array('AQID')], [1, 2, 3]);
  assert.deepEqual([...urlBase64ToUint8Array('AQ==')], [1]);
  assert.ok(sameKey(new Uint8Array([1, 2]).buffer, new Uint8Array([1, 2])));
  assert.ok(!sameKey(new Uint8Array([1, 2]).buffer, new Uint8Array([1, 3])));
  assert.ok(!sameKey(null, new Uint8Array([1])));
});

const VAPID = 'BPc3' + 'A'.repeat(83); // 87 base64url characters: a 65-byte key

/** A fake browser (service worker container, PushManager, Notification) and server. */
function fakeEnv({ permission = 'default', answer = 'granted', vapid = 200 } = {}) {
  const calls = [];
  let subscription = null;
  const store = new Map();
  const reg = {
    pushManager: {
      getSubscription: async () => subscription,
      subscribe: async (opts) => {
        calls.push(['subscribe', opts.userVisibleOnly, [...opts.applicationServerKey].length]);
        subscription = {
          options: { applicationServerKey: opts.applicationServerKey.buffer },
          toJSON: () => ({ endpoint: 'https://push.example/x', expirationTime: null, keys: { p256dh: 'p', auth: 'a' } }),
          unsubscribe: async () => { calls.push(['unsubscribe']); subscription = null; return true; },
        };
        return subscription;
      },
    },
  };
  let registered = false;
  const env = {
    navigator: {
      language: 'en-GB',
      serviceWorker: {
        register: async (url, opts) => { calls.push(['register', url, opts.scope]); registered = true; return reg; },
        getRegistration: async () => (registered ? reg : undefined),
        get ready() { return Promise.resolve(reg); },
      },
    },
    PushManager: function PushManager() {},
    Notification: {
      permission,
      requestPermission() {
        calls.push(['requestPermission']);
        env.Notification.permission = answer;
        return Promise.resolve(answer);
      },
    },
    localStorage: { getItem: (k) => store.get(k) ?? null, setItem: (k, v) => store.set(k, v), removeItem: (k) => store.delete(k) },
  };
  const fetch = async (path, init = {}) => {
    const method = init.method ?? 'GET';
    calls.push([method, path, init.headers?.Authorization ?? '', init.body ? JSON.parse(init.body) : undefined]);
    if (path === '/v1/push/vapid') {
      return vapid === 200 ? { ok: true, json: async () => ({ public_key: VAPID }) } : { ok: false, status: vapid, json: async () => ({ error: 'off' }) };
    }
    return { ok: true, status: 200, json: async () => ({ device_id: 'laptop', provider: 'webpush' }) };
  };
  return { env, fetch, calls, store, hasSubscription: () => subscription !== null };
}

test('push setup: enable asks permission first, subscribes with the VAPID key and registers', async () => {
  const f = fakeEnv();
  const p = new WebPushSetup({ token: 'tok', key: 'parley:alice:laptop', env: f.env, fetch: f.fetch });
  assert.equal(await p.state(), 'off');
  f.calls.length = 0;
  assert.equal(await p.enable(), 'on');
  assert.deepEqual(f.calls[0], ['requestPermission']);
  assert.deepEqual(f.calls.find((c) => c[0] === 'register'), ['register', '/sw.js', '/']);
  assert.deepEqual(f.calls.find((c) => c[0] === 'subscribe'), ['subscribe', true, 65]);
  const put = f.calls.find((c) => c[0] === 'PUT');
  assert.deepEqual(put, ['PUT', '/v1/push/device', 'Bearer tok', {
    provider: 'webpush', locale: 'en-GB',
    subscription: { endpoint: 'https://push.example/x', expirationTime: null, keys: { p256dh: 'p', auth: 'a' } },
  }]);
  assert.equal(await p.state(), 'on');

  // A new page of the same device registers the subscription again.
  f.calls.length = 0;
  const again = new WebPushSetup({ token: 'tok', key: 'parley:alice:laptop', env: f.env, fetch: f.fetch });
  assert.equal(await again.refresh(), 'on');
  assert.equal(f.calls.filter((c) => c[0] === 'PUT').length, 1);

  // Sign-out: the server forgets the device, the browser the subscription.
  f.calls.length = 0;
  await again.disable();
  assert.deepEqual(f.calls.map((c) => c[0]), ['DELETE', 'unsubscribe']);
  assert.equal(await again.state(), 'off');
});

test('push setup: a refusal or a server without Web Push leaves it off', async () => {
  const denied = fakeEnv({ answer: 'denied' });
  const p = new WebPushSetup({ token: 't', key: 'k', env: denied.env, fetch: denied.fetch });
  assert.equal(await p.enable(), 'denied');
  assert.equal(await p.state(), 'denied');
  assert.ok(!denied.calls.some((c) => c[0] === 'PUT' || c[0] === 'subscribe'));

  const off = fakeEnv({ vapid: 404 });
  assert.equal(await new WebPushSetup({ token: 't', key: 'k', env: off.env, fetch: off.fetch }).state(), 'unavailable');

  assert.equal(await new WebPushSetup({ token: 't', key: 'k', env: { navigator: {} }, fetch: off.fetch }).state(), 'unsupported');
  assert.ok(!pushSupported({ navigator: {} }));
});

test('push setup: signing out on a device that never enabled push keeps the browser subscription', async () => {
  const f = fakeEnv({ permission: 'granted' });
  const alice = new WebPushSetup({ token: 'a', key: 'parley:alice:laptop', env: f.env, fetch: f.fetch });
  await alice.enable();
  const bob = new WebPushSetup({ token: 'b', key: 'parley:bob:tablet', env: f.env, fetch: f.fetch });
  f.calls.length = 0;
  await bob.disable();
  assert.deepEqual(f.calls.map((c) => c[0]), ['DELETE']);
  assert.ok(f.hasSubscription());
});
