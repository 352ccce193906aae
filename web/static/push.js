// Web Push for the page: registers the service worker (/sw.js), subscribes with the server's
// VAPID key and registers the subscription as this device's push target
// (PUT /v1/push/device); signing out removes it (DELETE /v1/push/device) and unsubscribes.
// Everything the browser provides is passed in, so Node's tests can drive it with fakes.

/** Decodes base64url (with or without padding) into bytes, as applicationServerKey wants. */
export function urlBase64ToUint8Array(s) {
  const b64 = s.replace(/-/g, '+').replace(/_/g, '/').replace(/=+$/, '');
  const bin = atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** True when two keys (ArrayBuffer, typed array or null) hold the same bytes. */
export function sameKey(a, b) {
  if (!a || !b) return false;
  const x = new Uint8Array(a.buffer ?? a, a.byteOffset ?? 0, a.byteLength);
  const y = new Uint8Array(b.buffer ?? b, b.byteOffset ?? 0, b.byteLength);
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

/** True when this browser can receive Web Push: a service worker, PushManager, Notification. */
export function pushSupported(env = globalThis) {
  return !!(env.navigator?.serviceWorker && env.PushManager && env.Notification);
}

/**
 * One signed-in device's Web Push setup. States: 'unsupported' (no Push in this browser),
 * 'unavailable' (the server has Web Push off), 'denied' (the user blocked notifications),
 * 'off', 'on'.
 */
export class WebPushSetup {
  /**
   * @param {object} o
   * @param {string} o.token the device token (Authorization: Bearer)
   * @param {string} o.key where "enabled on this device" is remembered in storage
   * @param {object} [o.env] globalThis, or a fake with navigator, Notification, PushManager
   * @param {Function} [o.fetch]
   * @param {Storage} [o.storage] localStorage or a fake
   */
  constructor({ token, key, env = globalThis, fetch = env.fetch?.bind(env), storage = env.localStorage }) {
    this.token = token;
    this.key = `parley.push:${key}`;
    this.env = env;
    this.fetch = fetch;
    this.storage = storage;
    this.vapidKey = null;
  }

  /** The current state, asking the server once for its VAPID key. */
  async state() {
    if (!pushSupported(this.env)) return 'unsupported';
    if (!(await this.#vapid())) return 'unavailable';
    const perm = this.env.Notification.permission;
    if (perm === 'denied') return 'denied';
    if (perm !== 'granted' || !this.storage?.getItem(this.key)) return 'off';
    const sub = await (await this.#registration(false))?.pushManager.getSubscription();
    return sub ? 'on' : 'off';
  }

  /**
   * Turns push on. Call it from a click: it asks for notification permission first, before
   * anything else is awaited, so the browser sees the user's gesture. Returns the new state.
   */
  async enable() {
    const asked = this.env.Notification.requestPermission();
    const perm = await asked;
    if (perm !== 'granted') return perm === 'denied' ? 'denied' : 'off';
    const key = await this.#vapid();
    if (!key) return 'unavailable';
    const reg = await this.#registration(true);
    const serverKey = urlBase64ToUint8Array(key);
    let sub = await reg.pushManager.getSubscription();
    if (sub && !sameKey(sub.options?.applicationServerKey, serverKey)) {
      await sub.unsubscribe(); // made with another server key: the server could not push to it
      sub = null;
    }
    sub ??= await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: serverKey });
    await this.#put(sub);
    this.storage?.setItem(this.key, '1');
    return 'on';
  }

  /**
   * Registers the subscription again if push is on for this device: at start-up, so the
   * server has the browser's current subscription (it can change). Returns the state.
   */
  async refresh() {
    const st = await this.state();
    if (st !== 'on') return st;
    const sub = await (await this.#registration(false)).pushManager.getSubscription();
    await this.#put(sub);
    return 'on';
  }

  /**
   * Turns push off for this device: removes the server's registration, then the browser's
   * subscription if this device made it. The DELETE is best effort (the token may already
   * be refused).
   */
  async disable() {
    const wasOn = !!this.storage?.getItem(this.key);
    this.storage?.removeItem(this.key);
    try {
      await this.#api('DELETE', '/v1/push/device');
    } catch { /* signing out with a dead token: nothing to remove it with */ }
    // The browser's subscription is shared by the tabs of this profile: leave it to a
    // device that did not turn it on here.
    if (!wasOn || !pushSupported(this.env)) return;
    const sub = await (await this.#registration(false))?.pushManager.getSubscription();
    await sub?.unsubscribe();
  }

  async #vapid() {
    if (this.vapidKey === null) {
      try {
        const r = await this.fetch('/v1/push/vapid', { cache: 'no-store' });
        this.vapidKey = r.ok ? ((await r.json()).public_key || '') : '';
      } catch {
        return ''; // offline: ask again next time
      }
    }
    return this.vapidKey;
  }

  async #registration(register) {
    const sw = this.env.navigator.serviceWorker;
    if (!register) return sw.getRegistration('/');
    await sw.register('/sw.js', { scope: '/' });
    return sw.ready;
  }

  async #put(sub) {
    const locale = this.env.navigator.language || '';
    await this.#api('PUT', '/v1/push/device', { provider: 'webpush', subscription: sub.toJSON(), locale });
  }

  async #api(method, path, body) {
    const r = await this.fetch(path, {
      method,
      headers: { Authorization: `Bearer ${this.token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    if (!r.ok) {
      const e = await r.json().catch(() => ({}));
      throw new Error(e.error ?? `HTTP ${r.status}`);
    }
    return r.json().catch(() => ({}));
  }
}
